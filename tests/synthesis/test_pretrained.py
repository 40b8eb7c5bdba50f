"""The shipped base model (pretrained/base-espeak-tiny) works from a clone of the repository: it is complete and
small, it synthesizes in the voice of a reference clip, and the fine-tuning recipe (configs/finetune.yaml as
written) warm-starts from it on real LJSpeech clips."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
PRETRAINED = REPO / "pretrained" / "base-espeak-tiny"
BUNDLED = REPO / "data" / "ljspeech-bundled"
MAX_BYTES = 20 * 1024 * 1024  # small enough to keep in the repository


REAL_BASE = REPO / "pretrained" / "base-real-tiny"  # the zero-shot base, pretrained on real voices
ALL_SHIPPED_BYTES = 40 * 1024 * 1024  # every shipped model together (links counted once)
VOCODER = REPO / "pretrained" / "vocoder-vocos-ljspeech"
REAL_VOCODER = REPO / "pretrained" / "vocoder-vocos-real"  # the LJSpeech one fine-tuned on the real-voice corpora


def _model_record(base: Path = PRETRAINED) -> dict:
    return json.loads((base / "model.json").read_text(encoding="utf-8"))


def _cli(args: list[str]):
    from myxtts.cli import main
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output[-3000:]
    return result


def _card_section(base: Path) -> str:
    """The part of docs/pretrained.md about one shipped base: from its heading to the next top-level heading."""
    card = (REPO / "docs" / "pretrained.md").read_text(encoding="utf-8")
    match = re.search(rf"^# [^\n]*`pretrained/{base.name}/`[^\n]*\n(.*?)(?=^# |\Z)", card, re.M | re.S)
    assert match, f"docs/pretrained.md has no section for pretrained/{base.name}/"
    return match.group(1)


@pytest.mark.parametrize("base", [PRETRAINED, REAL_BASE], ids=lambda base: base.name)
def test_shipped_base_is_complete_small_and_its_card_describes_it(base):
    for name in ("config.yaml", "vocab.json", "mel_stats.json", "corpus.json", "model.json"):
        assert (base / name).is_file(), name
    # its own vocoder is a shipped one, linked (not a second copy: the size below counts the base alone): the
    # LJSpeech vocoder for the espeak base, the one fine-tuned on the real voices' corpora for the real-voice base
    own = VOCODER if base == PRETRAINED else REAL_VOCODER
    assert (base / "vocoder").is_symlink() and (base / "vocoder").resolve() == own.resolve()
    record = _model_record(base)
    checkpoint_files = list((base / "checkpoints").iterdir())
    assert any(p.name.startswith(record["checkpoint"] + ".") for p in checkpoint_files)
    size = sum(p.stat().st_size for p in base.rglob("*") if p.is_file() and not p.is_symlink()
               and (base / "vocoder") not in p.parents)
    assert size < MAX_BYTES, f"{size} bytes"
    # its section of the card states the step and training minutes of the weights it ships (new weights, new card)
    card = _card_section(base)
    assert re.search(rf"\bstep {record['step']:,}\b|\bstep {record['step']}\b", card), "card and weights disagree"
    assert f"{record['training_minutes']:.0f} training minutes" in card
    # no path of the machine it was trained on in anything shipped
    for path in base.rglob("*"):
        if path.is_file() and path.suffix in (".yaml", ".json") and (base / "vocoder") not in path.parents:
            text = path.read_text(encoding="utf-8")
            assert "/work/" not in text and "/tmp/" not in text and "/home/" not in text, path


def test_the_real_voice_base_card_names_its_real_voices_and_their_licences():
    """The zero-shot base was trained on real speakers (its corpus record says how many), and its card names the
    corpora with their licences (LibriSpeech's CC BY 4.0 asks for credit) and the kept-out development speakers."""
    corpus = json.loads((REAL_BASE / "corpus.json").read_text(encoding="utf-8"))
    assert corpus["speakers"] > 100 and corpus["utterances"].get("held_out", 0) > 0, corpus
    card = _card_section(REAL_BASE)
    for needed in ("LibriSpeech", "CC BY 4.0", "Common Voice", "CC0", "kept out"):
        assert needed in card, needed
    assert f"{corpus['speakers']} real voices" in card
    shipped = {path.resolve() for folder in (REPO / "pretrained").iterdir() for path in folder.rglob("*")
               if path.is_file()}
    assert sum(path.stat().st_size for path in shipped) < ALL_SHIPPED_BYTES


def test_shipped_base_synthesizes_a_reference_voice(tmp_path):
    reference = sorted((BUNDLED / "wavs").glob("*.wav"))[0]
    short, long = tmp_path / "short.wav", tmp_path / "long.wav"
    said = _cli(["synthesize", "--run", str(PRETRAINED), "--text", "Printing, in the only sense.",
                 "--reference", str(reference), "--out", str(short)])
    # through the base's own vocoder: the shipped one (pretrained/base-espeak-tiny/vocoder links to it)
    assert f"vocoder: {PRETRAINED / 'vocoder'} (the run's own)" in said.output, said.output
    _cli(["synthesize", "--run", str(PRETRAINED), "--text",
          "Printing, in the only sense with which we are at present concerned, differs from most arts and crafts.",
          "--reference", str(reference), "--out", str(long)])
    audio_short, rate = sf.read(short)
    audio_long, rate_long = sf.read(long)
    config_rate = int(re.search(r"sample_rate: (\d+)", (PRETRAINED / "config.yaml").read_text()).group(1))
    assert rate == rate_long == config_rate
    # durations come from the duration predictor: about 2 s and about 6 s of speech, not silence
    assert 0.8 < len(audio_short) / rate < 4.0, len(audio_short) / rate
    assert len(audio_long) > 2.0 * len(audio_short)
    assert np.sqrt(np.mean(audio_long ** 2)) > 0.01


def test_finetuning_recipe_fits_the_shipped_base_as_the_demo_does():
    """configs/finetune.yaml builds the shipped base's model, front-end and text (the warm start's own checks pass);
    the demo config (test_demo trains it from the shipped base on real clips) builds the same."""
    from myxtts.config import load_config
    from myxtts.training.warm_start import check_compatible

    base = load_config(REAL_BASE / "config.yaml")
    checkpoint = str(REAL_BASE / "checkpoints" / _model_record(REAL_BASE)["checkpoint"])
    recipes = {name: load_config(REPO / "configs" / f"{name}.yaml") for name in ("finetune", "demo")}
    for name, cfg in recipes.items():
        assert cfg.init_from.resolve() == REAL_BASE.resolve(), name
        check_compatible(cfg, base, checkpoint, str(REAL_BASE))  # raises WarmStartError naming each difference
        assert cfg.text == base.text, name  # phonemes of the same language: the same symbol set
    # the same model but for its dropout, the synthesis-only mel_sharpening and pitch_variation, and the pitch modules a
    # warm start adds (the clone recipe's, not the demo's)
    model = {name: {k: v for k, v in cfg.to_dict()["model"].items()
                    if k not in ("dropout", "mel_sharpening", "pitch_conditioning", "pitch_variation")}
             for name, cfg in recipes.items()}
    assert recipes["finetune"].model.pitch_conditioning
    assert not base.model.pitch_conditioning
    assert model["finetune"] == model["demo"]
    # and a config that does not fit is refused before anything is trained
    from myxtts.config import apply_overrides, config_from_dict
    from myxtts.training.warm_start import WarmStartError

    wider = config_from_dict(apply_overrides(recipes["finetune"].to_dict(), ["model.text_layers=4"]),
                             base_dir=recipes["finetune"].base_dir)
    with pytest.raises(WarmStartError, match="text_layers: source 3, this run 4"):
        check_compatible(wider, base, checkpoint, str(PRETRAINED))


def test_shipped_base_speaks_in_voices_it_never_heard(tmp_path):
    """Zero-shot: two of the held-out espeak-ng voices (no base trained on them) as references; swapping the
    reference moves the output's mean spectrum the way the two real voices differ, by as much (measured: cosine
    0.87-0.89, 0.96-1.09x the real voices' difference)."""
    from test_voice_cloning import _mean_spectrum, _render

    from myxtts.audio import load_audio
    from myxtts.mel import MelFrontend
    from myxtts.data.espeak_corpus import HELD_OUT_VOICES
    from myxtts.synthesis import Synthesizer

    synthesizer = Synthesizer.from_run(PRETRAINED)
    cfg = synthesizer.cfg
    low, high = HELD_OUT_VOICES[2], HELD_OUT_VOICES[1]  # car_m7 (pitch 30) and nyc_f4 (pitch 65)
    reference_texts = ["The prison population fluctuated a great deal.",
                       "It was almost always in excess of the accommodation available."]
    clips = _render(tmp_path, (low, high), reference_texts)
    frontend = MelFrontend(cfg.audio)
    real = {name: np.mean([_mean_spectrum(frontend(load_audio(path, cfg.audio.sample_rate)).numpy())
                           for path in paths], axis=0) for name, paths in clips.items()}
    real_direction = real[low.name] - real[high.name]  # [n_mels]
    texts = ["Printing, in the only sense with which we are at present concerned.",
             "On the twenty seventh April, in the following year."]
    outputs = {name: [result.mel for result in synthesizer.synthesize(
        texts, load_audio(paths[0], cfg.audio.sample_rate), vocode=False)] for name, paths in clips.items()}
    for index in range(len(texts)):
        direction = _mean_spectrum(outputs[low.name][index]) - _mean_spectrum(outputs[high.name][index])
        cosine = float(direction @ real_direction / (np.linalg.norm(direction) * np.linalg.norm(real_direction)))
        moved = float(np.abs(direction).mean()) / float(np.abs(real_direction).mean())
        assert cosine >= 0.7 and moved >= 0.5, (index, cosine, moved)


# ---- the shipped vocoders ---------------------------------------------------------------------------------------
HELD_OUT_CLIP = BUNDLED / "wavs" / "LJ001-0174.wav"  # one of the vocoder benchmark's held-out clips: never trained on


@pytest.mark.parametrize("vocoder", [VOCODER, REAL_VOCODER], ids=lambda vocoder: vocoder.name)
def test_shipped_vocoder_is_complete_small_fits_the_base_and_its_card_describes_it(vocoder):
    from myxtts.config import load_config
    from myxtts.vocoder.neural import check_audio_match, read_vocoder_dir

    _, record = read_vocoder_dir(vocoder)
    size = sum(p.stat().st_size for p in vocoder.rglob("*") if p.is_file())
    assert size < MAX_BYTES, f"{size} bytes"
    check_audio_match(vocoder, record["audio"], "the shipped base", load_config(PRETRAINED / "config.yaml").audio)
    card = _card_section(vocoder)
    assert f"step {record['step']:,}" in card and f"{record['training_minutes']:.0f} training minutes" in card
    if vocoder == REAL_VOCODER:  # it has heard the real voices, and says whose (with their licences)
        for needed in ("LibriSpeech", "CC BY 4.0", "Common Voice", "CC0"):
            assert needed in record["trained_on"] and needed in card, needed
    for name in ("config.yaml", "vocoder.json"):
        text = (vocoder / name).read_text(encoding="utf-8")
        assert "/work/" not in text and "/tmp/" not in text, name
    # it ships its discriminators, and the clone recipe (configs/vocoder-finetune.yaml) builds the same generator
    # and discriminators, so its warm start restores both: a fine-tune against trained discriminators
    from myxtts.vocoder.discriminators import build_discriminators
    from myxtts.vocoder.generators import build_generator
    from myxtts.vocoder.neural import restore_generator

    recipe = load_config(REPO / "configs" / "vocoder-finetune.yaml")
    restored = restore_generator(vocoder, recipe, build_generator(recipe), build_discriminators(recipe))
    # and its fine-tune synthesises as the shipped vocoder does: part of the magnitude from the mel (the card says so)
    shipped_share = load_config(vocoder / "config.yaml").vocoder.magnitude_from_mel
    assert shipped_share == recipe.vocoder.magnitude_from_mel > 0 and f"magnitude_from_mel: {shipped_share}" in card
    assert record["discriminators"] is True and restored["discriminators"] is True


@pytest.mark.parametrize("vocoder", [VOCODER, REAL_VOCODER], ids=lambda vocoder: vocoder.name)
def test_shipped_vocoder_resynthesises_a_held_out_clip_and_speaks_for_the_base(tmp_path, vocoder):
    from myxtts.audio import load_audio
    from myxtts.mel import MelFrontend
    from myxtts.config import load_config
    from myxtts.vocoder.generators import build_generator
    from myxtts.vocoder.neural import NeuralVocoder, load_vocoder

    audio_cfg = load_config(PRETRAINED / "config.yaml").audio
    frontend = MelFrontend(audio_cfg)
    mel = frontend(load_audio(HELD_OUT_CLIP, audio_cfg.sample_rate)).numpy()  # [frames, n_mels]
    shipped = load_vocoder(vocoder, audio_cfg)
    untrained = NeuralVocoder(build_generator(load_config(vocoder / "config.yaml")), audio_cfg)

    def mel_error(candidate) -> float:
        return float(np.mean(np.abs(frontend(candidate(mel)).numpy() - mel)))

    assert mel_error(shipped) < 0.5 * mel_error(untrained)
    # the LJSpeech vocoder speaks for the espeak base when asked; the real-voice one is the real-voice base's own
    out = tmp_path / "base.wav"
    run = ["--run", str(PRETRAINED), "--vocoder", str(vocoder)] if vocoder == VOCODER else ["--run", str(REAL_BASE)]
    _cli(["synthesize", *run, "--text", "Printing, in the only sense.",
          "--reference", str(sorted((BUNDLED / "wavs").glob("*.wav"))[0]), "--out", str(out)])
    audio, rate = sf.read(out)
    assert rate == audio_cfg.sample_rate and 0.8 < len(audio) / rate < 4.0 and np.sqrt(np.mean(audio ** 2)) > 0.01
