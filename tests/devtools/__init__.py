"""The demo and the embedded server it runs on."""
