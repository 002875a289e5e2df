"""The embedded demo: a tiny tool-using chat model and an arithmetic task (see ``make demo``)."""
