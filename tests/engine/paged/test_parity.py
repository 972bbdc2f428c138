"""The starter model on the paged engine against transformers on the same (dequantized) weights."""

from __future__ import annotations

import torch

from engine.types import ChatMessage, GenerationRequest, SamplingParams

QUESTIONS = [
    "Hi!",
    "What is 2 + 2?",
    "Write a haiku about the sea.",
    "List the planets of the solar system in order from the sun.",
    "Explain in two sentences what a compiler does.",
    "Give me a recipe for pancakes.",
    "How do I reverse a list in Python?",
    "What is photosynthesis? " * 3,
    "Write a short story that begins with: The door creaked open and " + "the wind howled through the hall. " * 4,
    "Please answer carefully. " * 10 + "What is the boiling point of water at sea level?",
    "Here is a list of fruits: " + ", ".join(["apple", "banana", "cherry", "date", "elderberry", "fig", "grape"] * 4)
    + ". Which of them is red?",
    "Consider the following text. " + "Hearth runs language models locally on your own computer. " * 12
    + "What does Hearth do?",
]


def test_greedy_tokens_match_transformers_for_twelve_prompts_submitted_together(paged_backend, hf_starter):
    prompts = [paged_backend.prompt_tokens(GenerationRequest(model="s", messages=(ChatMessage("user", q),)))
               for q in QUESTIONS]  # fmt: skip
    lengths = sorted(len(p) for p in prompts)
    assert lengths[0] < 40 and lengths[-1] > 150, lengths  # varied lengths, as the issue asks
    params = SamplingParams(temperature=0, max_tokens=32)
    streams = [paged_backend.stream(GenerationRequest(model="s", prompt=paged_backend.render_chat(
        (ChatMessage("user", q),)), params=params)) for q in QUESTIONS]  # fmt: skip
    ours = [[t for c in s for t in c.token_ids] for s in streams]

    width = max(map(len, prompts))
    pad = 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = hf_starter.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=32, do_sample=False, pad_token_id=pad, eos_token_id=2
        )
    for i, row in enumerate(out[:, width:].tolist()):
        want = row[: row.index(2)] if 2 in row else row
        assert ours[i] == want, f"prompt {i} ({QUESTIONS[i][:30]!r}) diverged"
