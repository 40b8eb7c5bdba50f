"""The names of a prepared cache's files (``cfg.cache_dir``): the one place that names them.

``myxtts.data`` writes and reads them (the format: ``myxtts.data.cache``); ``myxtts.outputs`` tells a cache from any
other folder by them, as it tells a run by ``myxtts.run_dir``. This module imports nothing, so both can depend on it.
The cache's lock files are named by ``myxtts.locks``.
"""

MANIFEST_FILE = "manifest.json"  # written last: it makes the cache valid
VOCAB_FILE = "vocab.json"
REJECTED_FILE = "rejected.csv"
PLAN_FILE = "bucket_plan.json"  # a copy of the manifest's bucket plan
JOURNAL_FILE = "prepare-journal.jsonl"  # the clips a stopped prepare finished (``myxtts.data.journal``)
INDEX_FILE = "index.npz"  # the name of a manifest's index when the manifest records no content hash
INDEX_PREFIX = "index-"  # index-HASH.npz: an index named by its content
UTTERANCE_DIR = "utterances"
