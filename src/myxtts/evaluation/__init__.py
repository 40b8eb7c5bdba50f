"""Judging output: ``evaluate`` (a run on held-out clips), ``speech_check`` (does a model speak: the demo's
check), ``listening_measures`` (recognizer CER, voice embeddings), ``speaker_encoder`` (the pretrained judge of
the voice), ``metrics`` (MCD-DTW, alignment figures) and ``plots`` (matplotlib)."""
