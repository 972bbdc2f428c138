"""GGUF models through llama.cpp, with continuous batching over sequence slots."""

from engine.backends.llamacpp.backend import LlamaCppBackend

__all__ = ["LlamaCppBackend"]
