"""Features of the chats: each one plugs into the places the chats page offers (header buttons, notices,
side panels, composer attachments) and the controller's request preparers, and into nothing else.

A new feature is a new module here, built by the main window after the chats page.
"""

from app.features.documents import DocumentsFeature
from app.features.pictures import PicturesFeature
from app.features.tools import ToolsFeature

__all__ = ["DocumentsFeature", "PicturesFeature", "ToolsFeature"]
