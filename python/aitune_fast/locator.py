"""Locators: paths to the leaves of nested arguments, and the walk that finds them."""

from aitune_fast._core import Locator
from aitune_fast._enums import ObjectType

__all__ = ["Locator", "ObjectType"]
