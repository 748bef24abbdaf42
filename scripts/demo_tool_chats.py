"""Synthetic tool-calling conversations for the demo model (issue 5: a real tool-call round trip).

A handful of tools (weather, time, add, multiply, word lookup) under a few names each, asked for
in many phrasings, with OpenAI-style messages: the user asks, the assistant answers with
`tool_calls`, a `tool` message gives the result, the assistant answers using it. Around them:
conversations where tools are offered but not needed (a documentation or fortune question is
answered as usual), where the needed tool is missing (the assistant says it cannot), two calls in
one turn, and a second round. The conversations are plain data (messages + tools); the training
script renders them through the model's own chat template, exactly as transformers does.

Standard library only, deterministic for a given seed. `evaluation_cases()` are prompts whose
cities, words and numbers never occur in the training conversations.
"""

import json
import random

SYSTEM_PROMPTS = ["You are a helpful assistant.", "Be brief.", "Use the tools when they help.",
                  "You are the Brigade demo model. You answer with a fortune or a paragraph of the Python documentation."]

CITIES = """Paris London Berlin Madrid Rome Lisbon Vienna Prague Warsaw Budapest Athens Dublin Oslo
Stockholm Helsinki Copenhagen Amsterdam Brussels Zurich Geneva Munich Hamburg Milan Naples Venice
Florence Barcelona Valencia Seville Porto Lyon Marseille Nice Toulouse Bordeaux Edinburgh Glasgow
Manchester Liverpool Bristol Cardiff Belfast Reykjavik Tallinn Riga Vilnius Kyiv Minsk Moscow
Istanbul Ankara Cairo Tunis Algiers Casablanca Lagos Accra Nairobi Addis Ababa Kampala Dakar
Johannesburg Cape Town Durban Tokyo Osaka Kyoto Seoul Busan Beijing Shanghai Shenzhen Hong Kong
Taipei Manila Hanoi Bangkok Singapore Jakarta Delhi Mumbai Chennai Kolkata Karachi Lahore Dhaka
Kathmandu Colombo Tehran Baghdad Riyadh Dubai Doha Amman Beirut Jerusalem Sydney Melbourne Brisbane
Perth Adelaide Auckland Wellington Toronto Montreal Vancouver Ottawa Calgary Chicago Boston Seattle
Denver Austin Dallas Houston Miami Atlanta Phoenix Detroit Portland Philadelphia Washington
Nashville Lima Bogota Quito Santiago Caracas Havana Montevideo Asuncion Cordoba Recife Salvador
Brasilia Oxford Cambridge York Bath Leeds Sheffield Nantes Lille Strasbourg Cologne Dresden
Leipzig Hanover Bremen Stuttgart Salzburg Graz Krakow Gdansk Bergen Turku Malmo Gothenburg Antwerp
Ghent Utrecht Rotterdam Bologna Turin Genoa Palermo Bilbao Granada Malaga Split Zagreb Belgrade
Sofia Bucharest Tbilisi Yerevan Baku Almaty Tashkent Ulaanbaatar Vladivostok Anchorage Honolulu""".split()
# two-word cities were split above; put them back together
CITIES = [c for c in CITIES if c not in ("Addis", "Ababa", "Cape", "Town", "Hong", "Kong")]
CITIES += ["Addis Ababa", "Cape Town", "Hong Kong", "New York", "San Francisco", "Los Angeles",
           "Mexico City", "Buenos Aires", "Rio de Janeiro", "Sao Paulo", "Kuala Lumpur", "New Delhi",
           "Las Vegas", "Tel Aviv", "Abu Dhabi", "Saint Petersburg"]
# Never in training: the evaluation asks about these.
EVAL_CITIES = ["Luxembourg", "Marrakesh", "Winnipeg", "Hobart", "Kigali", "Pittsburgh", "Trieste",
               "Innsbruck", "Aarhus", "Lucerne", "Nagoya", "Cusco"]

WORDS = {
    "serene": "calm and peaceful", "candid": "truthful and straightforward",
    "brisk": "quick and energetic", "frugal": "careful with money", "gregarious": "fond of company",
    "lucid": "clear and easy to understand", "meticulous": "very careful about details",
    "nimble": "quick and light in movement", "obscure": "not well known",
    "prudent": "wise in practical matters", "resilient": "able to recover quickly",
    "tenacious": "holding firmly to something", "vivid": "bright and intense",
    "wary": "cautious about possible dangers", "zealous": "full of eager enthusiasm",
    "ambiguous": "open to more than one meaning", "benevolent": "kind and generous",
    "cordial": "warm and friendly", "diligent": "hard working and careful",
    "eloquent": "fluent and persuasive in speaking", "feeble": "lacking strength",
    "gloomy": "dark or sad", "humble": "modest about oneself", "idle": "not working or active",
    "jovial": "cheerful and friendly", "keen": "eager or enthusiastic", "lavish": "rich and generous",
    "mellow": "soft and pleasant", "naive": "lacking experience of life", "opaque": "not able to be seen through",
    "placid": "not easily upset", "quaint": "attractively old fashioned", "rigid": "unable to bend",
    "sparse": "thinly scattered", "tranquil": "free from disturbance", "uncanny": "strange in an unsettling way",
    "verbose": "using more words than needed", "whimsical": "playfully unusual", "yearn": "to long for something",
    "zest": "great enthusiasm", "abundant": "existing in large quantities", "bleak": "cold and empty",
    "clumsy": "awkward in movement", "dormant": "temporarily inactive", "elated": "very happy",
    "fickle": "changing often", "genuine": "truly what it is said to be", "hasty": "done too quickly",
    "immense": "extremely large", "jubilant": "feeling great joy", "kindle": "to set on fire",
    "lethargic": "sluggish and tired", "murky": "dark and dirty", "nocturnal": "active at night",
    "ominous": "giving the impression that something bad will happen", "pensive": "deep in thought",
    "rustic": "typical of the countryside", "somber": "dark and serious", "trivial": "of little importance",
    "vast": "of very great extent", "weary": "very tired", "austere": "severe and plain",
    "brittle": "hard but easily broken", "cryptic": "mysterious in meaning", "docile": "easy to control",
    "earnest": "serious and sincere", "fervent": "showing strong feeling", "gaunt": "thin and bony",
    "hollow": "empty inside", "intrepid": "fearless", "jaded": "tired of something after too much of it",
}
EVAL_WORDS = {"laconic": "using very few words", "sanguine": "optimistic in a bad situation",
              "stoic": "enduring pain without complaint", "aloof": "not friendly", "arid": "very dry",
              "spry": "active and lively", "terse": "brief and abrupt", "frail": "weak and delicate"}

SYLLABLES = ["ka", "lo", "ren", "vi", "dor", "sa", "mel", "tu", "ba", "ri", "gan", "no", "pe", "sil", "va", "zor",
             "fen", "li", "mar", "to", "bel", "ku", "ra", "den", "so", "vin", "ha", "ly", "ost", "ter", "um", "ech"]


def invented_city(rng):
    """A made-up place name: with these in the mix, a city can only be got right by copying it
    from the question, not by remembering a short list."""
    name = "".join(rng.choice(SYLLABLES) for _ in range(rng.choice([2, 2, 3, 3, 4]))).capitalize()
    if rng.random() < 0.1:
        name += " " + "".join(rng.choice(SYLLABLES) for _ in range(2)).capitalize()
    return name


def word_pool(texts, rng, limit=3000):
    """Words and made-up 'definitions' (short spans of the same texts) for lookup_word: many of
    them, so the call and the answer must copy instead of recall."""
    import re
    counts = {}
    for t in texts:
        for w in re.findall(r"\b[a-z]{4,12}\b", t):
            counts[w] = counts.get(w, 0) + 1
    words = sorted(w for w, c in counts.items() if c >= 3 and w not in EVAL_WORDS)
    rng.shuffle(words)
    spans = []
    for t in texts:
        tokens = re.findall(r"[A-Za-z]+", t)
        if len(tokens) >= 8:
            n = rng.randint(2, 6)
            start = rng.randint(0, len(tokens) - n)
            spans.append(" ".join(tokens[start:start + n]).lower())
        if len(spans) >= limit:
            break
    return {w: spans[i % len(spans)] for i, w in enumerate(words[:limit])}


CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "foggy", "snowy", "clear", "stormy", "partly cloudy", "drizzly"]

TOOL_NAMES = {
    "weather": ["get_weather", "get_current_weather", "weather"],
    "time": ["get_time", "get_current_time", "local_time"],
    "add": ["add", "add_numbers", "sum"],
    "multiply": ["multiply", "multiply_numbers", "product"],
    "word": ["lookup_word", "define_word", "dictionary"],
}
DESCRIPTIONS = {
    "weather": ["Get the current weather in a city", "Get the weather for a city.", "Current weather in a given city",
                "Weather in a city"],
    "time": ["Get the local time in a city", "Current time in a given city", "What time it is in a city."],
    "add": ["Add two numbers", "Return the sum of a and b.", "Adds two numbers together"],
    "multiply": ["Multiply two numbers", "Return the product of a and b.", "Multiplies two numbers"],
    "word": ["Look up the definition of an English word", "Define a word.", "Dictionary lookup of a word"],
}
PARAMS = {"weather": [("city", "string", ["The city name", "City, e.g. Paris"])],
          "time": [("city", "string", ["The city name", "City, e.g. Tokyo"])],
          "add": [("a", "number", ["First number"]), ("b", "number", ["Second number"])],
          "multiply": [("a", "number", ["First number"]), ("b", "number", ["Second number"])],
          "word": [("word", "string", ["The word to define", "An English word"])]}

QUESTIONS = {
    "weather": ["What is the weather in {city}?", "What's the weather in {city}?", "What's the weather like in {city}?",
                "How is the weather in {city}?", "How's the weather in {city} today?", "Weather in {city}?",
                "weather {city}", "Tell me the weather in {city}.", "Is it sunny in {city}?",
                "Is it raining in {city} right now?", "Do I need an umbrella in {city}?", "How warm is it in {city}?",
                "What is the temperature in {city}?", "Can you check the weather in {city} for me?",
                "I am going to {city}. What is the weather there?", "Please get the weather for {city}.",
                "what is the weather in {city}"],
    "time": ["What time is it in {city}?", "What's the time in {city}?", "Tell me the local time in {city}.",
             "What is the current time in {city}?", "time in {city}", "Can you check the time in {city}?",
             "Is it late in {city}?", "What is the time in {city} now?"],
    "add": ["What is {a} plus {b}?", "What is {a} + {b}?", "Add {a} and {b}.", "{a} + {b} = ?",
            "Please add {a} to {b}.", "What is the sum of {a} and {b}?", "How much is {a} plus {b}?",
            "Compute {a} + {b}.", "what is {a} plus {b}"],
    "multiply": ["What is {a} times {b}?", "What is {a} * {b}?", "Multiply {a} by {b}.",
                 "What is the product of {a} and {b}?", "How much is {a} times {b}?", "Compute {a} * {b}.",
                 "{a} times {b}?"],
    "word": ["What does {word} mean?", "What does the word \"{word}\" mean?", "Define {word}.",
             "What is the meaning of {word}?", "Look up the word {word}.", "{word}: what does it mean?",
             "Give me the definition of {word}.", "What is the definition of the word {word}?"],
}
ANSWERS = {
    "weather": ["It is {condition} and {temperature_c} °C in {city}.",
                "The weather in {city} is {condition}, {temperature_c} degrees Celsius.",
                "In {city} it is {condition} with a temperature of {temperature_c} °C.",
                "{city}: {condition}, {temperature_c} °C."],
    "time": ["It is {time} in {city}.", "The local time in {city} is {time}.", "In {city} it is now {time}."],
    "add": ["{a} plus {b} is {result}.", "The sum is {result}.", "{a} + {b} = {result}."],
    "multiply": ["{a} times {b} is {result}.", "The product is {result}.", "{a} * {b} = {result}."],
    "word": ["{Word} means {definition}.", "The word \"{word}\" means {definition}.",
             "{Word}: {definition}."],
}
CANNOT = {"weather": "Sorry, I cannot check the weather.", "time": "Sorry, I cannot look up the time.",
          "add": "Sorry, I have no tool to add numbers.", "multiply": "Sorry, I have no tool to multiply numbers.",
          "word": "Sorry, I cannot look up words."}
PAIR_QUESTIONS = ["What is the weather in {c1} and in {c2}?", "Weather in {c1} and {c2}?",
                  "How is the weather in {c1} and {c2}?", "Compare the weather in {c1} and {c2}."]
PAIR_ANSWERS = ["In {c1} it is {k1} and {t1} °C; in {c2} it is {k2} and {t2} °C.",
                "{c1}: {k1}, {t1} °C. {c2}: {k2}, {t2} °C."]


class WordBook:
    def __init__(self, definitions):
        self.definitions = definitions
        self.keys = sorted(definitions)


def tool_schema(rng, kind, name, sort_keys):
    """An OpenAI tool object; half of them with keys sorted, as a server that re-serialises them sends."""
    props = {}
    for pname, ptype, pdescs in PARAMS[kind]:
        prop = {"type": ptype}
        if rng.random() < 0.4:
            prop["description"] = rng.choice(pdescs)
        props[pname] = prop
    parameters = {"type": "object", "properties": props}
    if rng.random() < 0.8:
        parameters["required"] = [p[0] for p in PARAMS[kind]]
    function = {"name": name}
    if rng.random() < 0.9:
        function["description"] = rng.choice(DESCRIPTIONS[kind])
    function["parameters"] = parameters
    tool = {"type": "function", "function": function}
    if sort_keys:
        tool = json.loads(json.dumps(tool, sort_keys=True))
    return tool


def number(rng):
    r = rng.random()
    if r < 0.5:
        return rng.randint(0, 99)
    if r < 0.9:
        return rng.randint(100, 999)
    return rng.randint(1000, 9999)


def fresh_call_id(rng):
    return "call_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12))


class Task:
    """One tool use: the question, the call's arguments, the tool's result and the final answer."""

    def __init__(self, rng, kind, cities, words, seen_only=False):
        self.kind = kind
        self.seen_only = seen_only
        if kind in ("weather", "time"):
            real = cities is not CITIES or self.seen_only or rng.random() < 0.5
            city = rng.choice(cities) if real else invented_city(rng)
            self.arguments = {"city": city}
            self.question = rng.choice(QUESTIONS[kind]).format(city=city)
            if kind == "weather":
                self.result = {"city": city, "temperature_c": rng.randint(-15, 38), "condition": rng.choice(CONDITIONS)}
            else:
                self.result = {"city": city, "time": f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"}
            fields = dict(self.result)
        elif kind in ("add", "multiply"):
            a, b = number(rng), number(rng)
            self.arguments = {"a": a, "b": b}
            self.question = rng.choice(QUESTIONS[kind]).format(a=a, b=b)
            self.result = {"result": a + b if kind == "add" else a * b}
            fields = {"a": a, "b": b, **self.result}
        else:
            word = rng.choice(words.keys)
            self.arguments = {"word": word}
            self.question = rng.choice(QUESTIONS[kind]).format(word=word)
            self.result = {"word": word, "definition": words.definitions[word]}
            fields = {**self.result, "Word": word.capitalize()}
        self.answer = rng.choice(ANSWERS[kind]).format(**fields)

    def call_message(self, rng, name):
        return {"id": fresh_call_id(rng), "type": "function",
                "function": {"name": name, "arguments": json.dumps(self.arguments)}}


def tool_content(rng, result):
    """What a client sends back: compact JSON (JSON.stringify) or Python's default spacing."""
    return json.dumps(result, separators=(",", ":")) if rng.random() < 0.5 else json.dumps(result)


def offered_tools(rng, needed, sort_keys):
    """The tools of one request: the needed kinds plus 0-2 others, shuffled; returns (tools, names)."""
    kinds = list(needed)
    others = [k for k in TOOL_NAMES if k not in kinds]
    rng.shuffle(others)
    kinds += others[: rng.choice([0, 0, 1, 1, 2])]
    rng.shuffle(kinds)
    names = {k: (TOOL_NAMES[k][0] if rng.random() < 0.6 else rng.choice(TOOL_NAMES[k][1:])) for k in kinds}
    return [tool_schema(rng, k, names[k], sort_keys) for k in kinds], names


def with_system(rng, messages):
    if rng.random() < 0.2:
        return [{"role": "system", "content": rng.choice(SYSTEM_PROMPTS)}] + messages
    return messages


def round_trip(rng, task, name):
    """user -> assistant tool call -> tool result -> assistant answer."""
    call = task.call_message(rng, name)
    return [{"role": "user", "content": task.question},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": tool_content(rng, task.result)},
            {"role": "assistant", "content": task.answer}]


def conversation(rng, plain_items, cities, words):
    """One training conversation: {"messages": [...], "tools": [...]}."""
    sort_keys = rng.random() < 0.5
    r = rng.random()
    kinds = list(TOOL_NAMES)
    if r < 0.65:  # the round trip, sometimes stopping right after the call
        task = Task(rng, rng.choice(kinds), cities, words)
        tools, names = offered_tools(rng, [task.kind], sort_keys)
        messages = round_trip(rng, task, names[task.kind])
        if rng.random() < 0.15:
            messages = messages[:2]
        elif rng.random() < 0.15:  # a second round with the same tools
            second = Task(rng, rng.choice(list(names)), cities, words)
            messages += round_trip(rng, second, names[second.kind])
    elif r < 0.72:  # two calls in one turn
        t1, t2 = Task(rng, "weather", cities, words), Task(rng, "weather", cities, words)
        if t1.arguments == t2.arguments:
            return None
        tools, names = offered_tools(rng, ["weather"], sort_keys)
        c1, c2 = t1.call_message(rng, names["weather"]), t2.call_message(rng, names["weather"])
        fields = {"c1": t1.arguments["city"], "c2": t2.arguments["city"],
                  "k1": t1.result["condition"], "k2": t2.result["condition"],
                  "t1": t1.result["temperature_c"], "t2": t2.result["temperature_c"]}
        messages = [{"role": "user", "content": rng.choice(PAIR_QUESTIONS).format(**fields)},
                    {"role": "assistant", "content": "", "tool_calls": [c1, c2]},
                    {"role": "tool", "tool_call_id": c1["id"], "content": tool_content(rng, t1.result)},
                    {"role": "tool", "tool_call_id": c2["id"], "content": tool_content(rng, t2.result)},
                    {"role": "assistant", "content": rng.choice(PAIR_ANSWERS).format(**fields)}]
    elif r < 0.75:  # the needed tool is not offered
        task = Task(rng, rng.choice(kinds), cities, words)
        others = [k for k in kinds if k != task.kind]
        rng.shuffle(others)
        tools, _ = offered_tools(rng, others[:1], sort_keys)
        tools = [t for t in tools if t["function"]["name"] not in TOOL_NAMES[task.kind]]
        messages = [{"role": "user", "content": task.question}, {"role": "assistant", "content": CANNOT[task.kind]}]
    else:  # tools offered, an ordinary question answered as usual
        item = rng.choice(plain_items)
        tools, _ = offered_tools(rng, [rng.choice(kinds)], sort_keys)
        messages = [{"role": "user", "content": item["question"]}, {"role": "assistant", "content": item["text"]}]
    return {"messages": with_system(rng, messages), "tools": tools}


def training_conversations(count, seed, plain_items, pooled_words):
    """`plain_items`: dicts with "question" and "text" (short documentation or fortune answers);
    `pooled_words`: word -> definition from word_pool(), mixed with the hand-written WORDS."""
    rng = random.Random(seed)
    book = WordBook({**pooled_words, **WORDS})
    out = []
    while len(out) < count:
        c = conversation(rng, plain_items, CITIES, book)
        if c is not None:
            out.append(c)
    return out


def e2e_tools():
    """The tools tests/e2e and tests/integration/serve send (OpenAI order; the server sorts keys)."""
    return [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {
            "name": "add", "description": "Add two numbers",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                           "required": ["a", "b"]}}}]


def evaluation_cases(seed=99, seen=False):
    """Prompts (with their expected call and result) whose arguments never occur in training: for
    each, the first turn should call `name` with `arguments`, and after the result the answer should
    contain every string in `expect_in_answer`. The first cases are exactly what the tests send.
    With `seen`, the cities and words are the training ones (the numbers are new either way)."""
    rng = random.Random(seed)
    cases = []
    weather = {"city": "Paris", "temperature_c": 18, "condition": "sunny"}
    cases.append({"tools": json.loads(json.dumps(e2e_tools(), sort_keys=True)),
                  "question": "What is the weather in Paris?", "name": "get_weather",
                  "arguments": {"city": "Paris"}, "result": weather, "expect_in_answer": ["18", "sunny"]})
    cases.append({"tools": json.loads(json.dumps(e2e_tools(), sort_keys=True)),
                  "question": "What is 12 plus 30?", "name": "add",
                  "arguments": {"a": 12, "b": 30}, "result": {"result": 42}, "expect_in_answer": ["42"]})
    for i in range(40):
        kind = ["weather", "time", "add", "multiply", "word"][i % 5]
        if seen:
            task = Task(rng, kind, CITIES, WordBook(WORDS), seen_only=True)
        else:
            task = Task(rng, kind, EVAL_CITIES, WordBook(EVAL_WORDS))
        tools, names = offered_tools(rng, [kind], rng.random() < 0.5)
        expect = [str(v) for k, v in task.result.items() if k in ("temperature_c", "time", "result", "definition")]
        cases.append({"tools": tools, "question": task.question, "name": names[kind], "arguments": task.arguments,
                      "result": task.result, "expect_in_answer": expect})
    return cases
