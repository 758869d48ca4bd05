"""Text embedding behind one small interface, so the model can change without touching
ingest or query. The default model ships inside a Python package: nothing is downloaded."""

from reachstore_server.embedding.embedder import Embedder, UsemEmbedder, default_embedder

__all__ = ["Embedder", "UsemEmbedder", "default_embedder"]
