// rsched dashboard behaviour. Served from this package, as every script of the page: the
// Content-Security-Policy allows no inline script.
(function () {
  "use strict";

  // A live region reloads every few seconds (hx-trigger="every Ns"). Skip a reload while the
  // tab is hidden (no requests nobody looks at) or while the viewer is using a form inside it
  // (typing a note, ticking dead letters), so nothing they entered is swept away.
  function busy(region) {
    if (region.contains(document.activeElement) && document.activeElement !== document.body) {
      return true;
    }
    var fields = region.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) return true;
      } else if (f.type !== "hidden" && f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function polling(elt) {
    return elt && elt.hasAttribute && elt.hasAttribute("data-poll");
  }

  document.addEventListener("htmx:beforeRequest", function (evt) {
    var elt = evt.detail.elt;
    if (polling(elt) && (document.hidden || busy(elt))) evt.preventDefault();
  });

  // A reload already on its way when the viewer started typing is dropped when it arrives:
  // the next one, once the form is left, brings the news.
  document.addEventListener("htmx:beforeSwap", function (evt) {
    var elt = evt.detail.elt;
    if (polling(elt) && busy(elt)) evt.detail.shouldSwap = false;
  });

  // Buttons and forms with data-confirm ask first.
  document.addEventListener("click", function (evt) {
    var button = evt.target.closest ? evt.target.closest("[data-confirm]") : null;
    if (button && !window.confirm(button.getAttribute("data-confirm"))) {
      evt.preventDefault();
    }
  });

  // A header checkbox with data-select-all="name" ticks every checkbox of that name.
  document.addEventListener("change", function (evt) {
    var name = evt.target.getAttribute && evt.target.getAttribute("data-select-all");
    if (!name) return;
    var form = evt.target.form || document;
    var boxes = form.querySelectorAll('input[type="checkbox"][name="' + name + '"]');
    for (var i = 0; i < boxes.length; i++) boxes[i].checked = evt.target.checked;
  });
})();
