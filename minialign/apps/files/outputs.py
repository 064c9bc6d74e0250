"""What each command writes (rows.FORMATS' values), known before a model is loaded and declared without torch: the
command line checks its --output against it first (rows.check_output) and builds its parser from the product table
(apps/products.py), and each job declares it (jobs.py)."""

# A record holding a list of objects per row (ner's entities) is .jsonl only: a CSV cell would hold JSON text, and no
# tensor layout fits it.
OUTPUT_FORMATS = {"score": ("jsonl", "csv"), "embed": ("jsonl", "safetensors"), "classify": ("jsonl", "csv"),
                  "ner": ("jsonl",)}
OUTPUT_FORMATS["qa"] = ("jsonl", "csv")  # csv with --top-k 1 only (qa_job: a list of answers per row is .jsonl only)
# zero-shot's record is the pipeline's dict, a ranking: the candidate labels best first and their scores, two lists
# per row, so .jsonl only, as ner. A CSV row could hold them only as JSON text in a cell, or as columns whose meaning
# changes from row to row (label_1, score_1, ...: each row's own order), or as one score column per candidate label
# (classify's layout), which exists only where every row has the same labels, not with a row field of labels. The
# best label and its score alone would drop the rest of the ranking, and with multi_label the other labels that hold.
OUTPUT_FORMATS["zero-shot"] = ("jsonl",)
# fill-mask: a list of candidates per mask, whatever the row's number of masks (a regular record)
OUTPUT_FORMATS["fill-mask"] = ("jsonl",)
