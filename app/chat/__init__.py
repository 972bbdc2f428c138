"""The chats' behaviour apart from widgets: models of messages, answer runs, the context policy."""

from app.chat.answer_run import AnswerOutcome, AnswerRun
from app.chat.context import ContextFit, fit_history
from app.chat.controller import ChatController
from app.chat.conversation_model import ConversationModel

__all__ = ["AnswerOutcome", "AnswerRun", "ChatController", "ContextFit", "ConversationModel", "fit_history"]
