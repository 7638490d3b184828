"""A small Inspect task the tests run against `vauban serve` (host/cli/tests/import.rs):
twelve one-word questions, Inspect's own `includes()` scorer, two epochs.
Its logs are what `vauban import inspect` reads; nothing here is vauban's."""

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

QUESTIONS = [
    ("france", "What is the capital of France? Answer with one word.", "Paris"),
    ("japan", "What is the capital of Japan? Answer with one word.", "Tokyo"),
    ("italy", "What is the capital of Italy? Answer with one word.", "Rome"),
    ("spain", "What is the capital of Spain? Answer with one word.", "Madrid"),
    ("egypt", "What is the capital of Egypt? Answer with one word.", "Cairo"),
    ("canada", "What is the capital of Canada? Answer with one word.", "Ottawa"),
    ("kenya", "What is the capital of Kenya? Answer with one word.", "Nairobi"),
    ("peru", "What is the capital of Peru? Answer with one word.", "Lima"),
    ("two", "What is 2 + 2? Answer with a number.", "4"),
    ("seven", "What is 3 + 4? Answer with a number.", "7"),
    ("sky", "What colour is a clear daytime sky? Answer with one word.", "blue"),
    ("ice", "What is frozen water called? Answer with one word.", "ice"),
]


@task
def capitals():
    return Task(
        dataset=[Sample(id=i, input=q, target=t) for i, q, t in QUESTIONS],
        solver=generate(),
        scorer=includes(),
        epochs=2,
    )
