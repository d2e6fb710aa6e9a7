"""Write hygiene: when a new memory is an exact or near-exact duplicate of a stored one.

Near-exact means the same words in the same order once case, Unicode compatibility forms,
punctuation and spacing are set aside: "I live in Porto." and "i live in  porto" are one
memory. Similar-sounding memories that say something else are not duplicates, and embeddings
alone cannot tell them apart (the static embedder puts "I have two cats." and "I have three
cats." at cosine 0.964, "I live in Porto." and "I live in Lisbon." at 0.74), so the words decide,
through ``words_key``, an indexed payload key of every memory (adr/0113).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

WORD = re.compile(r"\w+")


def normal_form(text: str) -> str:
    """The words of ``text``, NFKC-normalised and case-folded, joined by single spaces."""
    return " ".join(WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def words_key(text: str) -> str:
    """A short fixed-size key of ``normal_form(text)`` (128-bit blake2b, hex): stored with each
    memory and indexed, so the check is a key lookup, not a search."""
    return hashlib.blake2b(normal_form(text).encode(), digest_size=16).hexdigest()


def same_memory(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are the same memory by the rule above (blank never matches)."""
    left = normal_form(a)
    return bool(left) and left == normal_form(b)
