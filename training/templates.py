"""Word lists from which prompts.py writes its training prompts (one entry per line).

Everything here was written for this project in the style of chat instructions and of IFEval's
verifiable constraints; no evaluation prompt (IFEval, GSM8K test, the demo task) is copied. Slots
in braces are filled by data.instruction_prompts: {topic} {person} {product} {place}
{event} {sentence} {kw1} {kw2} {n} {m} {letter} {lang}.
"""

from __future__ import annotations


def _lines(block: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in block.strip().splitlines() if line.strip())


TOPICS = _lines(
    """
the water cycle|renewable energy|a trip to the mountains|learning a new language
the history of the bicycle|healthy breakfast ideas|remote work|the moon landing|coffee
a small bakery|climate change|the importance of sleep|video games|a rainy day in the city
friendship|the ocean|artificial intelligence|saving money|a job interview|gardening
the Roman Empire|electric cars|a birthday party|volcanoes|public libraries|recycling
the solar system|a new smartphone|running a marathon|cats|dogs|chess|the internet
a haunted house|time management|photosynthesis|jazz music|a science fair|the first day of school
bees|a lost wallet|city parks|online shopping|a family dinner|the stock market|winter holidays
the human heart|robots|a camping trip|pizza|the printing press|social media|a football match
the French Revolution|ancient Egypt|dinosaurs|the rainforest|tea ceremonies|space travel
a lighthouse keeper|the invention of the telephone|street food|minimalism|public transport
a village festival|homework|school uniforms|the Olympic Games|meditation|a broken umbrella
the northern lights|a penguin colony|vaccines|earthquakes|a farmers market|yoga|the piano
a long train journey|moving to a new city|a first apartment|online privacy|nuclear power
the Great Wall of China|a desert island|a thunderstorm|knitting|the game of basketball
a kitchen disaster|a missing cat|a talking tree|a detective in London|a dragon who cannot fly
the benefits of reading|a museum visit|board games|a weekend in Paris|the life of a farmer
honey|chocolate|the history of money|cloud computing|a hospital night shift|a school play
an old photograph|a surprise party|a snow day|the stars|friendly neighbours|a summer job
mobile phones in schools|fast fashion|the four-day work week|city gardens|a local election
""".replace("|", "\n")
)

PEOPLE = _lines(
    """
a nurse|a software engineer|a retired teacher|a high school student|a new manager|a chef
a college graduate looking for a first job|a freelance designer|a small business owner
my landlord|my grandmother|a pen pal in another country|my team at work|a customer
a professional athlete|a librarian|a museum guide|a mayor|a volunteer firefighter
an astronaut|a musician on tour|my best friend|a new neighbour|my boss|a history professor
""".replace("|", "\n")
)

PRODUCTS = _lines(
    """
a reusable water bottle|a smart watch|noise-cancelling headphones|a solar phone charger
a standing desk|an electric bike|a meal-kit delivery service|a language learning app
a pair of hiking boots|a robot vacuum cleaner|an eco-friendly toothbrush|a board game cafe
a budgeting app|a portable coffee maker|a kids' science kit|a yoga mat|a weather app
""".replace("|", "\n")
)

PLACES = _lines(
    """
Japan|Iceland|Rome|New York City|a small fishing village|the Amazon|Kenya|Canada|Mexico City
Scotland|a national park|the Alps|Australia|Istanbul|a quiet beach town|Peru|Norway|Vietnam
""".replace("|", "\n")
)

EVENTS = _lines(
    """
a team meeting|a charity run|a book club evening|a wedding|a product launch|a school reunion
a coding workshop|a neighbourhood clean-up|a farewell lunch|a science conference|a garden party
""".replace("|", "\n")
)

SENTENCES = _lines("""
The cat sat on the warm windowsill and watched the rain.
A group of children are playing football in the park.
Money cannot buy happiness, but it helps.
The meeting has been moved to Thursday afternoon.
Every student should learn to cook before leaving home.
The old bridge was closed after the storm.
Technology makes people lonelier.
She finished the marathon in under four hours.
A man in a red jacket is selling flowers at the station.
Homework should be banned in primary schools.
""")

QUESTIONS = _lines(
    """
Why is the sky blue?|How do vaccines work?|What causes the seasons on Earth?
How does a bill become a law?|What is the difference between weather and climate?
Why do we dream?|How do airplanes stay in the air?|What is inflation?
How can I improve my handwriting?|What should I consider when buying a used car?
How do I prepare for a job interview?|What are black holes?|Why do leaves change colour?
How does the internet work?|What is a healthy amount of screen time?|How are rainbows formed?
What is the best way to learn to play the guitar?|How do bees make honey?
Why is exercise good for the brain?|What is machine learning?|How do I start a vegetable garden?
Can you explain how compound interest works?|What happened during the Industrial Revolution?
How do I write a good cover letter?|What are some ways to reduce stress?
""".replace("|", "\n")
)

TASKS = _lines("""
Write a short poem about {topic}.
Write a poem about {topic} in the style of Shakespeare.
Write a blog post about {topic}.
Write a short story about {topic}.
Write a very short story about {person} and {topic}.
Write an essay about {topic}.
Write a persuasive essay arguing that {topic} matters.
Explain {topic} to a ten-year-old.
Explain {topic} to someone who has never heard of it.
Write a product description for {product}.
Write an advertisement for {product}.
Write a catchy slogan for {product} and explain why it works.
Write a pitch for investors about {product}.
Write a letter to {person} about {topic}.
Write an email to {person} about {topic}.
Write an email to {person} inviting them to {event}.
Write a formal email to {person} asking for a day off.
Write a thank-you note to {person}.
Write a cover letter for {person} applying for a new position.
Write a resume for {person}.
Write a job description for a role working with {topic}.
Write a biography of {person} who loves {topic}.
Write an itinerary for a trip to {place}.
Write a travel guide for {place}.
Give me {n} tips about {topic}.
List {n} fun facts about {topic}.
What are the pros and cons of {topic}?
Compare {topic} and {topic2}.
Write a limerick about {topic}.
Write a haiku about {topic}.
Write song lyrics about {topic}.
Write a rap about {topic}.
Write a joke about {topic}.
Write a riddle about {topic} and give its answer.
Summarize what you know about {topic}.
Write a speech about {topic} for a school assembly.
Write a dialogue between two people discussing {topic}.
Write a list of questions someone might ask about {topic}.
Describe {topic} in detail.
Write a tweet about {topic}.
Write a social media post announcing {event}.
Write a short review of a book about {topic}.
Write a review of {product}.
Write a news article about {topic}.
Write a diary entry about {topic}.
Write a recipe inspired by {topic}.
Write a step-by-step guide on how to get started with {topic}.
Write a lesson plan for teaching {topic}.
Write a weekly plan for {person} who wants to learn about {topic}.
Write a critique of the following sentence: "{sentence}"
Rewrite the following sentence in a more formal way: "{sentence}"
Given the sentence "{sentence}", ask a question about it and answer it.
Paraphrase this sentence in three different ways: "{sentence}"
Is the following statement true? Explain your reasoning. "{sentence}"
Write a story that begins with the sentence: "{sentence}"
Suggest {n} names for {product} and explain each one.
Write a motivational message for {person}.
Write an apology letter to {person} for missing {event}.
Write an agenda for {event}.
Write a FAQ section for {product}.
Write a quiz with {n} questions about {topic}.
Write a debate opening statement about {topic}.
Write a fairy tale about {topic}.
Write a funny story about {person} at {event}.
Plan a {n}-day trip to {place} for {person}.
{question}
{question} Explain your answer.
I am {person}. {question}
""")

CONSTRAINTS = _lines("""
Your entire response should be in English, and in all lowercase letters. \
No capital letters are allowed.
Your entire response should be in English, and in all capital letters.
Please reply in English using only capital letters.
Use only lowercase letters in your answer.
Do not use any commas in your response.
You are not allowed to use any commas in your answer.
Your response should contain at least {n} sentences.
Your response should contain less than {n} sentences.
Answer with less than {m} words.
Answer with at least {m} words.
Your answer should be at most {m} words long.
Include the keywords '{kw1}' and '{kw2}' in the response.
Make sure to include the word '{kw1}' at least {n} times.
Do not include the words '{kw1}' or '{kw2}' in your response.
In your response, the letter {letter} should appear at least {m} times.
Wrap your entire response with double quotation marks.
Finish your response with this exact phrase: Is there anything else I can help with? \
No other words should follow this phrase.
End your response with the exact phrase 'Let me know if you have additional questions.'
Your response must have {n} sections. Mark the beginning of each section with SECTION X.
Your response must have {n} parts. Mark the beginning of each part with Part X.
There should be {n} paragraphs. Paragraphs are separated with the markdown divider: ***
There should be exactly {n} paragraphs, separated by two new lines. \
The first paragraph must start with the word '{kw1}'.
Highlight at least {n} sections in your answer with markdown, i.e. *highlighted section*.
Your answer must contain a title, wrapped in double angular brackets, such as <<title>>.
At the end of your response, please explicitly add a postscript starting with P.S.
Please add a postscript at the end starting with P.P.S
Your response should contain exactly {n} bullet points. \
Use markdown bullet points such as: * This is a point.
Entire output should be wrapped in JSON format. You can use markdown ticks such as ```.
First repeat the request word for word without change, then give your answer.
Give two different responses. Responses should be separated by 6 asterisk symbols: ******.
Your response must contain at least {n} placeholders represented by square brackets, \
such as [address].
Your ENTIRE response should be in {lang} language, no other language is allowed.
Use words in all capital letters to highlight key points, but fewer than {n} times.
Label each paragraph with PARAGRAPH X.
Start your answer with the word '{kw1}'.
Do not use any bullet points.
Answer in a formal tone.
Make your answer funny.
Keep it short.
Please be detailed.
Use simple words that a child would understand.
""")

KEYWORDS = _lines(
    """
future|simple|bright|history|people|energy|quiet|journey|value|green|friend|light|change
power|time|world|story|music|water|team|dream|balance|fresh|careful|smile|market|ocean
""".replace("|", "\n")
)

LANGUAGES = ("English", "French", "Spanish", "German", "Italian")

GSM8K_STYLES = tuple(
    style.replace("\\n", "\n")
    for style in _lines("""
{q}
{q}\\nLet's think step by step.
Solve the following math problem. Show your reasoning and give the final answer.\\n\\n{q}
Question: {q}\\nAnswer:
{q}\\nPlease reason step by step, and put your final answer after '####'.
Answer the following question. Explain each step briefly.\\n{q}
""")
)
