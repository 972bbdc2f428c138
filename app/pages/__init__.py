"""The main window's pages: Chats, Models, Hardware, Local API."""

from app.pages.api_page import ApiPage
from app.pages.chats_page import ChatsPage
from app.pages.hardware_page import HardwarePage
from app.pages.models_page import ModelsPage

__all__ = ["ApiPage", "ChatsPage", "HardwarePage", "ModelsPage"]
