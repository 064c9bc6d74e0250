"""The sentence splitter on a table of English news and summary cases."""

import pytest

from minialign.text.sentences import split_sentences

CASES = [
    # plain
    ("The cat sat. The dog ran.", ["The cat sat.", "The dog ran."]),
    ("No final stop here", ["No final stop here"]),
    ("", []),
    ("   \n\n  ", []),
    ("One sentence only.", ["One sentence only."]),
    # titles and abbreviations
    ("Mr. Smith went to Washington. He met Dr. Jones.", ["Mr. Smith went to Washington.", "He met Dr. Jones."]),
    ("Mrs. Brown and Prof. Green spoke. St. Louis was cold.", ["Mrs. Brown and Prof. Green spoke.", "St. Louis was cold."]),
    ("He works at Apple Inc. The company grew.", ["He works at Apple Inc.", "The company grew."]),
    ("Apple Inc. reported profits on Monday.", ["Apple Inc. reported profits on Monday."]),
    ("Use tools, e.g. hammers. They help.", ["Use tools, e.g. hammers.", "They help."]),
    ("Some fruit, i.e. apples, is red.", ["Some fruit, i.e. apples, is red."]),
    ("The U.S. economy grew. Markets rose.", ["The U.S. economy grew.", "Markets rose."]),
    ("He moved to the U.S. He liked it.", ["He moved to the U.S.", "He liked it."]),
    ("The meeting is at 5 p.m. on Friday.", ["The meeting is at 5 p.m. on Friday."]),
    ("It ended at 5 p.m. The crowd left.", ["It ended at 5 p.m.", "The crowd left."]),
    ("It happened on Jan. 5, 2021. Nobody saw it.", ["It happened on Jan. 5, 2021.", "Nobody saw it."]),
    ("The vote is in Sept. Lawmakers disagree.", ["The vote is in Sept. Lawmakers disagree."]),
    ("Apples, pears, etc. The list goes on.", ["Apples, pears, etc.", "The list goes on."]),
    ("Smith vs. Jones was decided. No. 5 won.", ["Smith vs. Jones was decided.", "No. 5 won."]),
    # initials
    ("J. K. Rowling wrote it. George W. Bush read it.", ["J. K. Rowling wrote it.", "George W. Bush read it."]),
    ("The author, T.S. Eliot, won.", ["The author, T.S. Eliot, won."]),
    # numbers, prices, urls, emails, files
    ("Pi is 3.14 roughly. It is irrational.", ["Pi is 3.14 roughly.", "It is irrational."]),
    ("Shares fell 2.5% to $10.75 on Tuesday. Analysts were surprised.",
     ["Shares fell 2.5% to $10.75 on Tuesday.", "Analysts were surprised."]),
    ("It cost $5. He paid cash.", ["It cost $5.", "He paid cash."]),
    ("Visit www.example.com for details. Then sign up.", ["Visit www.example.com for details.", "Then sign up."]),
    ("See https://example.org/a.html?x=1. It explains.", ["See https://example.org/a.html?x=1.", "It explains."]),
    ("Email jane.doe@example.co.uk today. She replies fast.",
     ["Email jane.doe@example.co.uk today.", "She replies fast."]),
    ("Open report.pdf and data.csv first. Then run main.py.", ["Open report.pdf and data.csv first.", "Then run main.py."]),
    ("He was born in 1990. She was born later.", ["He was born in 1990.", "She was born later."]),
    # ellipses, ! and ?
    ("Wait... What happened? Nobody knows!", ["Wait...", "What happened?", "Nobody knows!"]),
    ("He paused… then continued.", ["He paused… then continued."]),
    ("Really?! Yes!!! Amazing.", ["Really?!", "Yes!!!", "Amazing."]),
    ('"Why?" he asked.', ['"Why?" he asked.']),
    # quotes and brackets after the stop
    ('He said, "We will win." Then he left.', ['He said, "We will win."', "Then he left."]),
    ("“It is over.” The crowd cheered.", ["“It is over.”", "The crowd cheered."]),
    ("The result was clear (see above.) Everyone agreed.", ["The result was clear (see above.)", "Everyone agreed."]),
    ("She left. (He stayed.) They met later.", ["She left.", "(He stayed.)", "They met later."]),
    # lists, newlines, blank lines
    ("Steps:\n1. Open the box.\n2. Remove the item.\n3. Enjoy.",
     ["Steps:", "1. Open the box.", "2. Remove the item.", "3. Enjoy."]),
    ("Key points:\n- Sales rose\n- Costs fell", ["Key points:", "- Sales rose", "- Costs fell"]),
    ("Headline Without Stop\nThe story begins here.", ["Headline Without Stop", "The story begins here."]),
    ("First paragraph ends.\n\nSecond paragraph starts.", ["First paragraph ends.", "Second paragraph starts."]),
    ("This line is wrapped\nin the middle of a sentence.", ["This line is wrapped\nin the middle of a sentence."]),
    ("A. First option. B. Second option.", ["A. First option.", "B. Second option."]),
    # unicode, emoji, other scripts
    ("Café prices rose 😀. Tourists paid more.", ["Café prices rose 😀.", "Tourists paid more."]),
    ("東京は晴れ。大阪は雨。", ["東京は晴れ。", "大阪は雨。"]),
    ("Он пришёл. Она ушла.", ["Он пришёл.", "Она ушла."]),
    ("Tabs\tand  spaces. Still fine.", ["Tabs\tand  spaces.", "Still fine."]),
    # summaries
    ("The company, based in N.Y., cut 500 jobs. Its CEO, Ms. Lee, resigned on Oct. 3.",
     ["The company, based in N.Y., cut 500 jobs.", "Its CEO, Ms. Lee, resigned on Oct. 3."]),
    ("Police said the suspect, 34, was arrested at 10:30 a.m. local time. He has not been named.",
     ["Police said the suspect, 34, was arrested at 10:30 a.m. local time.", "He has not been named."]),
]


@pytest.mark.parametrize("text,expected", CASES, ids=[c[0][:40] for c in CASES])
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_non_string_raises():
    with pytest.raises(TypeError):
        split_sentences(None)


def test_control_characters_do_not_break_it():
    out = split_sentences("Bell\x07 rings. Next\x00 one.")
    assert out == ["Bell\x07 rings.", "Next\x00 one."]
