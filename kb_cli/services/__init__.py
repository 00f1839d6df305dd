"""One function per verb. Each opens its own short transactions and returns records."""
