"""agora: the operator's command line for a governed AI agent's durable state."""

__version__ = "0.2.0"
