"""Which dialect answers which proxy path (the agents' base URLs point here)."""

from . import anthropic_messages, chat_completions, openai_responses
from .dialect import Dialect

DIALECTS: dict[str, Dialect] = {
    "/v1/chat/completions": chat_completions.DIALECT,
    "/v1/messages": anthropic_messages.DIALECT,
    "/v1/responses": openai_responses.DIALECT,
}
# Anthropic's prompt-length route: answered with the engine's count, never recorded as a turn.
COUNT_TOKENS = "/v1/messages/count_tokens"
