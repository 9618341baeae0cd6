"""Training prompts for the SmolLM2 drafter: GSM8K *train* questions and instruction prompts.

The instruction prompts are written here from templates in the style of IFEval (a task, a topic
and a verifiable constraint); none is an IFEval evaluation prompt, and GSM8K test is never read.
The verifier answers every prompt itself (on-policy), which is what maximises acceptance.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TOPICS = [
    "the water cycle",
    "renewable energy",
    "a trip to the mountains",
    "learning a new language",
    "the history of the bicycle",
    "healthy breakfast ideas",
    "remote work",
    "the moon landing",
    "coffee",
    "a small bakery",
    "climate change",
    "the importance of sleep",
    "video games",
    "a rainy day in the city",
    "friendship",
    "the ocean",
    "artificial intelligence",
    "saving money",
    "a job interview",
    "gardening",
    "the Roman Empire",
    "electric cars",
    "a birthday party",
    "volcanoes",
    "public libraries",
    "recycling",
    "the solar system",
    "a new smartphone",
    "running a marathon",
    "cats",
    "dogs",
    "chess",
    "the internet",
    "a haunted house",
    "time management",
    "photosynthesis",
    "jazz music",
    "a science fair",
    "the first day of school",
    "bees",
    "a lost wallet",
    "city parks",
    "online shopping",
    "a family dinner",
    "the stock market",
    "winter holidays",
    "the human heart",
    "robots",
    "a camping trip",
    "pizza",
    "the printing press",
    "social media",
    "a football match",
]

TASKS = [
    "Write a short poem about {topic}.",
    "Write a blog post about {topic}.",
    "Write a short story about {topic}.",
    "Write an essay about {topic}.",
    "Explain {topic} to a ten-year-old.",
    "Write a product description related to {topic}.",
    "Write a letter to a friend about {topic}.",
    "Give me {n} tips about {topic}.",
    "What are the pros and cons of {topic}?",
    "Write a limerick about {topic}.",
    "Summarize what you know about {topic}.",
    "Write a speech about {topic} for a school assembly.",
    "Write a riddle about {topic} and give its answer.",
    "Write an advertisement about {topic}.",
    "Write a dialogue between two people discussing {topic}.",
    "Write a list of questions someone might ask about {topic}.",
    "Describe {topic} in detail.",
    "Write a haiku about {topic}.",
    "Write a tweet about {topic}.",
    "Write a short review of a book about {topic}.",
]

CONSTRAINTS = [
    "",
    "Your entire response should be in English, and in all lowercase letters.",
    "Your entire response should be in English, and in all capital letters.",
    "Do not use any commas in your response.",
    "Your response should contain at least {n} sentences.",
    "Answer with less than {m} words.",
    "Answer with at least {m} words.",
    "Include the keywords '{kw1}' and '{kw2}' in the response.",
    "Do not include the word '{kw1}' in your response.",
    "Wrap your entire response with double quotation marks.",
    "Finish your response with this exact phrase: Is there anything else I can help with?",
    "Your response must have {n} sections. Mark the beginning of each section with SECTION X.",
    "There should be {n} paragraphs. Paragraphs are separated with the markdown divider: ***",
    "Highlight at least {n} sections in your answer with markdown, i.e. *highlighted section*.",
    "Your answer must contain a title, wrapped in double angular brackets, such as <<title>>.",
    "At the end of your response, please explicitly add a postscript starting with P.S.",
    "Your response should contain exactly {n} bullet points. Use markdown bullet points "
    "such as: * This is a point.",
    "Entire output should be wrapped in JSON format.",
    "First repeat the request word for word without change, then give your answer.",
    "In your response, the letter e should appear at least {m} times.",
    "Give two different responses. Responses should be separated by 6 asterisk symbols: ******.",
    "Answer in a formal tone.",
    "Make your answer funny.",
]

KEYWORDS = [
    "future",
    "simple",
    "bright",
    "history",
    "people",
    "energy",
    "quiet",
    "journey",
    "value",
    "green",
    "friend",
    "light",
    "change",
    "power",
    "time",
    "world",
    "story",
    "music",
    "water",
]

GSM8K_STYLES = [
    "{q}",
    "{q}\nLet's think step by step.",
    "Solve the following math problem. Show your reasoning and give the final answer.\n\n{q}",
    "Question: {q}\nAnswer:",
    "{q}\nPlease reason step by step, and put your final answer after '####'.",
]


def instruction_prompts(count: int, seed: int) -> list[str]:
    """``count`` distinct templated instruction prompts (deterministic in ``seed``)."""
    rng = random.Random(seed)
    prompts: set[str] = set()
    ordered: list[str] = []
    while len(ordered) < count:
        fill = {
            "topic": rng.choice(TOPICS),
            "n": rng.randint(2, 6),
            "m": rng.choice([50, 100, 150, 200, 300]),
            "kw1": rng.choice(KEYWORDS),
            "kw2": rng.choice(KEYWORDS),
        }
        constraints = rng.sample(CONSTRAINTS, k=rng.choice([1, 1, 2]))
        text = " ".join([rng.choice(TASKS), *constraints]).strip().format(**fill)
        if text not in prompts:
            prompts.add(text)
            ordered.append(text)
    return ordered


def gsm8k_train_questions(data_dir: Path) -> list[str]:
    """Questions from ``gsm8k/train.jsonl`` (the training split only)."""
    path = Path(data_dir) / "gsm8k" / "train.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; pass --data-dir pointing at the shared data")
    with open(path) as fh:
        return [json.loads(line)["question"] for line in fh if line.strip()]


def drafter_prompts(data_dir: Path, num_instruction: int, seed: int) -> list[str]:
    """The shuffled training mix: styled GSM8K train questions plus instruction prompts."""
    rng = random.Random(seed)
    questions = gsm8k_train_questions(data_dir)
    math = [rng.choice(GSM8K_STYLES).format(q=q) for q in questions]
    prompts = math + instruction_prompts(num_instruction, seed)
    rng.shuffle(prompts)
    return prompts
