"""kb: the asynchronous ingestion lifecycle of a knowledge base, from the command line."""

__version__ = "0.1.0"
