"""English number verbalisation for the text cleaner: cardinals, ordinals, years, decimals, currency.

Written here (no dependency) so the output is stable across environments: the cached token ids depend
on it (``Config.feature_hash`` covers ``text.cleaner``).
"""

from __future__ import annotations

import re

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = ["", "thousand", "million", "billion", "trillion", "quadrillion", "quintillion", "sextillion"]
_IRREGULAR_ORDINALS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                       "nine": "ninth", "twelve": "twelfth"}
# (symbol, unit, units, subunit, subunits)
_CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"), "£": ("pound", "pounds", "penny", "pence"),
               "€": ("euro", "euros", "cent", "cents")}


def _below_hundred(number: int) -> str:
    if number < 20:
        return _ONES[number]
    tens, ones = divmod(number, 10)
    return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")


def _below_thousand(number: int) -> str:
    hundreds, rest = divmod(number, 100)
    words = [f"{_ONES[hundreds]} hundred"] if hundreds else []
    if rest:
        words.append(_below_hundred(rest))
    return " ".join(words)


# integers with more digits are read digit by digit in groups of three ("one two three, four five six"): past the
# named scales, and never through int() (Python refuses to convert 4,301 digits or more)
LONGEST_SPOKEN_NUMBER = 15


def spoken_integer(digits: str) -> str:
    """A run of ASCII digits -> its words: a cardinal up to LONGEST_SPOKEN_NUMBER digits, else digit groups."""
    if len(digits) <= LONGEST_SPOKEN_NUMBER:
        return cardinal(int(digits))
    head = len(digits) % 3 or 3
    groups = [digits[:head]] + [digits[i:i + 3] for i in range(head, len(digits), 3)]
    return ", ".join(" ".join(_ONES[int(digit)] for digit in group) for group in groups)


def cardinal(number: int) -> str:
    """1234567 -> 'one million two hundred thirty-four thousand five hundred sixty-seven'."""
    if number < 0:
        return "minus " + cardinal(-number)
    if number == 0:
        return "zero"
    if number >= 1000 ** len(_SCALES):
        return " ".join(_ONES[int(digit)] for digit in str(number))  # beyond named scales: digit by digit
    groups = []
    scale = 0
    while number:
        number, group = divmod(number, 1000)
        if group:
            groups.append(_below_thousand(group) + (f" {_SCALES[scale]}" if scale else ""))
        scale += 1
    return " ".join(reversed(groups))


def ordinal(number: int) -> str:
    """23 -> 'twenty-third', 101 -> 'one hundred first'."""
    words = cardinal(number)
    head, separator, last = max(words.rpartition(" "), words.rpartition("-"), key=lambda part: len(part[0]))
    if last in _IRREGULAR_ORDINALS:
        last = _IRREGULAR_ORDINALS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return head + separator + last


def year(number: int) -> str:
    """1884 -> 'eighteen eighty-four', 1900 -> 'nineteen hundred', 1905 -> 'nineteen oh five'."""
    if 2000 <= number <= 2009 or number % 1000 == 0:
        return cardinal(number)
    century, rest = divmod(number, 100)
    if rest == 0:
        return f"{cardinal(century)} hundred"
    return f"{cardinal(century)} " + (f"oh {_ONES[rest]}" if rest < 10 else _below_hundred(rest))


def decimal(text: str) -> str:
    """'3.14' -> 'three point one four' (digits after the point one by one)."""
    whole, _, fraction = text.partition(".")
    words = spoken_integer(whole) if whole else "zero"
    return f"{words} point " + " ".join(_ONES[int(digit)] for digit in fraction)


def _currency(match: re.Match) -> str:
    unit, units, subunit, subunits = _CURRENCIES[match.group(1)]
    whole_text, fraction_text, scale = match.group(2).replace(",", ""), match.group(3), match.group(4)
    if scale:  # "$5 million" -> "five million dollars", "$2.5 billion" -> "two point five billion dollars"
        amount = decimal(f"{whole_text}.{fraction_text}") if fraction_text else spoken_integer(whole_text)
        return f"{amount} {scale.strip().lower()} {units}"
    if len(whole_text) > LONGEST_SPOKEN_NUMBER:
        return f"{spoken_integer(whole_text)} {units}"
    whole = int(whole_text)
    cents = int((fraction_text or "0")[:2].ljust(2, "0"))
    parts = []
    if whole:
        parts.append(f"{cardinal(whole)} {unit if whole == 1 else units}")
    if cents:
        parts.append(f"{cardinal(cents)} {subunit if cents == 1 else subunits}")
    return ", ".join(parts) if parts else f"zero {units}"


def _integer(match: re.Match) -> str:
    text = match.group(0)
    if len(text) == 4 and 1100 <= int(text) <= 2099:
        return year(int(text))
    return spoken_integer(text)


def _ordinal(match: re.Match) -> str:
    digits = match.group(1)
    return ordinal(int(digits)) if len(digits) <= LONGEST_SPOKEN_NUMBER else f"number {spoken_integer(digits)}"


_THOUSANDS_SEPARATOR = re.compile(r"\b\d{1,3}(?:,\d{3})+\b")
_CURRENCY = re.compile(r"([$£€])\s?(\d[\d,]*)(?:\.(\d+))?(\s+(?:thousand|million|billion|trillion)\b)?",
                       re.IGNORECASE)
# the sign after the amount, as many languages write it ("5€", "12,50 €" is not read: a comma is a separator here)
_CURRENCY_AFTER = re.compile(r"(\d[\d,]*)(?:\.(\d+))?\s?([$£€])")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s?%")
_ORDINAL = re.compile(r"\b(\d+)(st|nd|rd|th)\b", re.IGNORECASE)
_DECIMAL = re.compile(r"\d*\.\d+")
_INTEGER = re.compile(r"\d+")


def expand_numbers(text: str) -> str:
    """Spell out every number in ``text`` (currency, percentages, ordinals, decimals, years, cardinals)."""
    text = _CURRENCY.sub(_currency, text)  # before separators are removed: "$1,000.50"
    text = _CURRENCY_AFTER.sub(lambda m: _currency(_CURRENCY.match(f"{m.group(3)}{m.group(1)}"
                                                                   + (f".{m.group(2)}" if m.group(2) else ""))),
                               text)
    text = _THOUSANDS_SEPARATOR.sub(lambda match: match.group(0).replace(",", ""), text)
    text = _PERCENT.sub(lambda match: f"{match.group(1)} percent", text)
    text = _ORDINAL.sub(_ordinal, text)
    text = _DECIMAL.sub(lambda match: decimal(match.group(0)), text)
    return _INTEGER.sub(_integer, text)
