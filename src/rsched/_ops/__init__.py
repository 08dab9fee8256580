"""What operators watch: health classification and reads, the webhook, the HTTP probe.

Imports ``_core``, ``_redis`` and ``_store``.
"""
