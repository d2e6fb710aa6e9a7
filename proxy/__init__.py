"""memproxy: an OpenAI-compatible reverse proxy that gives chat applications long-term memory."""

__version__ = "0.1.0"
