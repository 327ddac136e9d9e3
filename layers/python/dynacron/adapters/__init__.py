"""Adapters: one package per backend (``aws``, ``sqlite``), each carrying out the ports."""
