"""The demo's arithmetic task, made by ``scripts/make_demo_data.py``: ``train.json``, ``val.json``,
and the conversations of ``agentfly sft``'s demo, ``sft_train.jsonl`` and ``sft_val.jsonl``."""
