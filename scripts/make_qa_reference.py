"""Make tests/products/data/transformers4_qa/: transformers v4's question-answering pipeline on tiny random
*ForQuestionAnswering models, for tests/products/test_question_answering.py. transformers 5 removed the pipeline
(QuestionAnsweringPipeline, pipelines/question_answering.py), so the reference is made once under v4 and kept:

    python3 -m venv /tmp/tf4 && /tmp/tf4/bin/pip install torch==2.13.0 "transformers==4.57.1"
    /tmp/tf4/bin/python scripts/make_qa_reference.py tests/products/data/transformers4_qa

Each family gets `<family>/`: the model (safetensors) and its tokenizer files, made by tests/family_builders.py's
writers (a WordPiece vocab.txt + tokenizer.json for bert, byte-level BPE vocab.json + merges.txt for roberta, a
SentencePiece Unigram tokenizer.json for xlm-roberta and deberta-v2), trained here on small corpora; its qa_outputs
weights scaled so the spans vary. reference.json holds the versions, the cases (CASES: how the pipeline was called,
with which options) and each family's outputs, as the pipeline returned them.
"""

import json
import sys
import warnings
from pathlib import Path

import tokenizers
import torch
import transformers

if int(transformers.__version__.split(".")[0]) != 4:
    sys.exit(f"transformers {transformers.__version__}: run this under transformers 4.x (5 has no question-answering "
             f"pipeline)")

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]  # family_builders (imports neither minialign nor pytest at the top)
from family_builders import FAMILIES, UNIGRAM_CORPUS, hf_model, write_tokenizer  # noqa: E402

FAMILY_NAMES = ("bert", "roberta", "xlm-roberta", "deberta-v2")
SIZES = dict(hidden_size=24, intermediate_size=32)  # 3 heads of 8 (family_builders.SHARED's head count)
QA_SCALE = 30.0  # qa_outputs' weights times this: logits a few units apart, so the best span moves with the text

QUESTION = "Where was the tower built?"
SIMPLE = "The Eiffel Tower was built in Paris and opened in 1889; it is 330 metres tall."
ACCENTS = "Zürich, Genève et Bâle sont des villes. La tour a été construite à Paris en 1889 — “quotes” (parentheses)!"
EMOJI = "Emoji 😀🎉 and 東京: the company grew by $5,000 on 2023-01-02, officials said 👍."
SPACES = "  Several   spaces\tand\nnewlines  between   words,  then   Police said the company grew.  "
PIECES = "Supercalifragilisticexpialidocious antidisestablishmentarianism: Numbers 3.14 and $5,000 in the report."
LONG = " ".join(dict.fromkeys(UNIGRAM_CORPUS)) + " " + ACCENTS + " " + SPACES  # some hundred tokens: many windows
SHORT = "Paris"  # fewer possible spans than the pipeline takes: v4 fills its list with spans of score 0

# name -> (how the pipeline is called: "pair" question=, context= strings; "lists" question=, context= lists;
# "one_context" a list of questions and one context; "dicts" a list of {"question", "context"}), inputs, options
CASES = {
    "default": ("pair", (QUESTION, SIMPLE), {}),
    "top_k": ("pair", (QUESTION, SIMPLE), {"top_k": 3}),
    "impossible": ("pair", (QUESTION, SIMPLE), {"handle_impossible_answer": True, "top_k": 2}),
    "impossible_short": ("pair", (QUESTION, "Paris in 1889."), {"handle_impossible_answer": True, "top_k": 3}),
    "impossible_long": ("pair", ("Who said it?", LONG), {"handle_impossible_answer": True}),
    "char_offsets": ("pair", ("What is it?", PIECES), {"align_to_words": False, "top_k": 3}),
    "words_of_pieces": ("pair", ("What is it?", PIECES), {"top_k": 3}),
    "short_answers": ("pair", (QUESTION, ACCENTS), {"max_answer_len": 2, "top_k": 3}),
    "long_default": ("pair", (QUESTION, LONG), {"top_k": 2}),
    "long_windows": ("pair", ("Which city?", LONG), {"doc_stride": 8, "top_k": 3}),
    "long_small_window": ("pair", ("When?", LONG), {"max_seq_len": 32, "doc_stride": 5, "top_k": 4,
                                                    "align_to_words": False}),
    "short_context": ("pair", (QUESTION, SHORT), {"top_k": 5}),
    "batch": ("dicts", [{"question": "Which cities?", "context": ACCENTS},
                        {"question": "What grew?", "context": EMOJI},
                        {"question": "Who said it?", "context": SPACES},
                        {"question": "  Which   words? 😀", "context": PIECES}], {"top_k": 2}),
    "lists": ("lists", (["Which cities?", "When?", "What is it?"], [ACCENTS, EMOJI, SPACES]), {}),
    "one_context": ("one_context", (["Which city?", "When was it opened?"], SIMPLE),
                    {"max_answer_len": 4, "max_question_len": 2}),  # unused by v4's fast tokenizers
}


def call(pipe, how, inputs, options):
    if how == "dicts":
        return pipe(inputs, **options)
    question, context = inputs
    return pipe(question=question, context=context, **options)


def main(out: Path) -> None:
    from tokenizers import BertWordPieceTokenizer, ByteLevelBPETokenizer, processors

    work = out / "_work"
    work.mkdir(parents=True, exist_ok=True)
    # the WordPiece (scripts/benchmarks/fixtures.py `wordpiece`, which imports minialign: written here) and the
    # byte-level BPE (tests/conftest.py `bpe_dir`), small and trained on the families' corpus
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(UNIGRAM_CORPUS, vocab_size=400,
                                  special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    wordpiece.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", wordpiece.token_to_id("[CLS]")), ("[SEP]", wordpiece.token_to_id("[SEP]"))])
    wordpiece.save_model(str(work))
    wordpiece.save(str(work / "tokenizer.json"))
    (work / "special_tokens_map.json").write_text(json.dumps(
        {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}))
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(UNIGRAM_CORPUS + ["Unicode: café naïve 東京 😀 — “quotes”"], vocab_size=300, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(work))

    reference = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                 "cases": {name: {"call": how, "inputs": inputs, "options": options}
                           for name, (how, inputs, options) in CASES.items()},
                 "outputs": {}}
    for family in FAMILY_NAMES:
        row = FAMILIES[family]
        directory = out / family
        vocab = write_tokenizer(row, directory, wordpiece_dir=work, bpe_dir=work)
        model = hf_model(row, vocab, num_labels=2, head="ForQuestionAnswering", **SIZES)
        with torch.no_grad():
            model.qa_outputs.weight.mul_(QA_SCALE)
        model.save_pretrained(directory, safe_serialization=True)
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
        assert tokenizer.is_fast and tokenizer.padding_side == "right"
        pipe = transformers.pipeline("question-answering", model=model, tokenizer=tokenizer, device="cpu")
        outputs = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Passing a list of SQuAD examples ... is deprecated"
            for name, (how, inputs, options) in CASES.items():
                outputs[name] = call(pipe, how, inputs, options)
        reference["outputs"][family] = outputs
    for path in work.iterdir():
        path.unlink()
    work.rmdir()
    (out / "reference.json").write_text(json.dumps(reference, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out} with transformers {transformers.__version__}, tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
