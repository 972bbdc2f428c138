"""Reusable widgets of the app (chat bubbles and view, composer, banner, memory bar, ...)."""

from app.widgets.banner import Banner
from app.widgets.chat_view import ChatView
from app.widgets.composer import Composer
from app.widgets.memory_bar import MemoryBar
from app.widgets.message_bubble import MessageBubble

__all__ = ["Banner", "ChatView", "Composer", "MemoryBar", "MessageBubble"]
