"""Shared benchmark helpers: servers, load generation, statistics, LoCoMo data."""
