"""Mesh search: every legal trainer mesh x inference layout for a recipe, ranked."""
from launcher.search.enumerate import MeshPoint, SearchResult, search

__all__ = ["MeshPoint", "SearchResult", "search"]
