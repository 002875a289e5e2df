"""The demo's arithmetic task, made by ``scripts/make_demo_data.py``: ``train.json``, ``val.json``."""
