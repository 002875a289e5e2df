"""Small task files shipped with the package (e.g. ``gsm8k_sample.json``)."""
