"""libespeak-ng through ctypes: the library and voice data of the ``espeakng-loader`` wheel (pip only).

No system package and no subprocess: ``pip install myxtts`` brings espeak-ng 1.52 with its data.

- phonemes (``myxtts.text``): one process-wide library instance, ``espeak_TextToPhonemes`` in IPA, guarded
  by a lock (the library keeps its voice in global state; ``prepare`` encodes from several threads);
- audio (``myxtts.data.espeak_corpus``): ``Renderer`` loads a private copy of the library and gives every
  clip a freshly initialised instance, because the synthesizer carries state from one utterance to the
  next (pitch flutter, oscillator phase: the same text rendered twice in one instance differs by a few
  samples). A fresh instance per clip renders exactly what a fresh ``espeak-ng -w`` process would, so a
  clip does not depend on the clips rendered before it, and each thread of a renderer pool has its own copy.

Voice names are espeak-ng's: a language code with an optional ``+variant`` (``en-us``, ``de``,
``en-gb-x-rp+f3``). A name that is not a voice file is looked up as a language (espeak-ng 1.52 finds
``en-gb`` only that way) and the variant is applied to the voice found.
"""

from __future__ import annotations

import _ctypes
import ctypes
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from myxtts.errors import InputError, SetupError

# speak_lib.h
_AUDIO_OUTPUT_SYNCHRONOUS = 0x02
_INITIALIZE_DONT_EXIT = 0x8000  # return an error instead of exit() when the data is missing
_CHARS_UTF8 = 1
_ENDPAUSE = 0x1000
_POS_CHARACTER = 1
_PHONEMES_IPA = 0x02
_RATE, _VOLUME, _PITCH = 1, 2, 3
_EE_OK = 0

_SYNTH_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class _Voice(ctypes.Structure):  # espeak_VOICE
    _fields_ = [("name", ctypes.c_char_p), ("languages", ctypes.c_char_p), ("identifier", ctypes.c_char_p),
                ("gender", ctypes.c_ubyte), ("age", ctypes.c_ubyte), ("variant", ctypes.c_ubyte),
                ("xx1", ctypes.c_ubyte), ("score", ctypes.c_int), ("spare", ctypes.c_void_p)]


class EspeakUnavailableError(SetupError):
    """libespeak-ng or its data cannot be loaded (a broken install, not a bad input)."""


class UnknownVoiceError(InputError):
    """espeak-ng has no voice (or variant) of that name."""


def bundled_paths() -> tuple[str, str]:
    """(library file, data folder) of the ``espeakng-loader`` wheel."""
    try:
        import espeakng_loader  # phonemes only: a missing wheel is an error to act on, not a failed import
    except ImportError as err:
        raise EspeakUnavailableError(f"The espeakng-loader package is not installed ({err}); it bundles the "
                                     "espeak-ng library myxtts uses. Install it: `pip install espeakng-loader` "
                                     "(a dependency of myxtts).") from None
    library = espeakng_loader.get_library_path()
    data = Path(library).parent / "espeak-ng-data"
    if not Path(library).is_file() or not (data / "phontab").is_file():
        raise EspeakUnavailableError(f"The espeakng-loader package is incomplete: {library} or {data}/phontab is "
                                     "missing. Reinstall it: `pip install --force-reinstall espeakng-loader`.")
    return library, str(data)


class EspeakLibrary:
    """One loaded and initialised libespeak-ng. Not thread-safe: callers serialise (``lock``)."""

    def __init__(self, library_path: str | os.PathLike, data_path: str | os.PathLike) -> None:
        self.library_path = str(library_path)
        self.data_path = str(data_path)
        self.lock = threading.RLock()
        try:
            lib = ctypes.CDLL(self.library_path)
        except OSError as err:
            raise EspeakUnavailableError(f"Cannot load the espeak-ng library {self.library_path}: {err}. Reinstall "
                                         "it: `pip install --force-reinstall espeakng-loader`.") from None
        self._lib = lib
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Info.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
        lib.espeak_Info.restype = ctypes.c_char_p
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetVoiceByProperties.argtypes = [ctypes.POINTER(_Voice)]
        lib.espeak_SetVoiceByProperties.restype = ctypes.c_int
        lib.espeak_GetCurrentVoice.argtypes = []
        lib.espeak_GetCurrentVoice.restype = ctypes.POINTER(_Voice)
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        lib.espeak_SetSynthCallback.argtypes = [_SYNTH_CALLBACK]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_Synth.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                     ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        lib.espeak_Synth.restype = ctypes.c_int
        lib.espeak_Terminate.argtypes = []
        lib.espeak_Terminate.restype = ctypes.c_int
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, os.fsencode(self.data_path), _INITIALIZE_DONT_EXIT)
        if rate <= 0:
            raise EspeakUnavailableError(f"espeak-ng could not initialise with the data in {self.data_path} "
                                         f"(error {rate}). Reinstall it: `pip install --force-reinstall "
                                         "espeakng-loader`.")
        self.sample_rate = rate
        self._samples: list[np.ndarray] = []
        self._callback = _SYNTH_CALLBACK(self._collect)  # referenced for as long as the library may call it
        lib.espeak_SetSynthCallback(self._callback)
        self._voice: str | None = None
        self._closed = False

    @property
    def version(self) -> str:
        return self._lib.espeak_Info(None).decode()

    def _collect(self, wav, count: int, events) -> int:  # noqa: ARG002 (ctypes signature)
        if count > 0 and wav:
            self._samples.append(np.ctypeslib.as_array(wav, (count,)).copy())
        return 0  # 0: continue

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"The espeak-ng library {self.library_path} was closed.")

    def set_voice(self, name: str) -> None:
        """Select a voice: ``language[+variant]``; UnknownVoiceError when espeak-ng has none of that name."""
        self._check_open()
        if name == self._voice:
            return
        self._voice = None
        wanted = name.strip().replace("_", "-")
        base, _, variant = wanted.partition("+")
        if not base or (variant and not (Path(self.data_path) / "voices" / "!v" / variant).is_file()):
            raise UnknownVoiceError(f"espeak-ng has no voice {name!r}" + (f" (no variant {variant!r})" if base else ""))
        lib = self._lib
        if lib.espeak_SetVoiceByName(wanted.encode()) != _EE_OK:
            by_language = _Voice(languages=base.encode())
            if lib.espeak_SetVoiceByProperties(ctypes.byref(by_language)) != _EE_OK:
                raise UnknownVoiceError(f"espeak-ng has no voice {name!r}")
            if variant:  # the lookup by language drops the variant: apply it to the voice found
                identifier = lib.espeak_GetCurrentVoice().contents.identifier.decode()
                if lib.espeak_SetVoiceByName(f"{identifier}+{variant}".encode()) != _EE_OK:
                    raise UnknownVoiceError(f"espeak-ng has no voice {name!r}")
        self._voice = name

    def text_to_phonemes(self, text: str) -> str:
        """IPA of ``text`` in the current voice, with stress marks; clauses joined by a space."""
        self._check_open()
        buffer = ctypes.create_string_buffer(text.encode("utf-8"))
        pointer = ctypes.c_void_p(ctypes.addressof(buffer))
        clauses = []
        while pointer.value:  # one clause per call; the library advances the pointer, NULL at the end
            result = self._lib.espeak_TextToPhonemes(ctypes.byref(pointer), _CHARS_UTF8, _PHONEMES_IPA)
            if result:
                clauses.append(result.decode("utf-8", "replace").strip())
        return " ".join(clause for clause in clauses if clause)

    def synthesize(self, text: str, voice: str, rate: int = 175, pitch: int = 50, volume: int = 100) -> np.ndarray:
        """``text`` spoken by ``voice``: int16 samples at ``sample_rate`` (22050 Hz), as ``espeak-ng -w``."""
        self.set_voice(voice)
        for parameter, value in ((_RATE, rate), (_PITCH, pitch), (_VOLUME, volume)):
            self._lib.espeak_SetParameter(parameter, int(value), 0)
        self._samples = []
        encoded = text.encode("utf-8") + b"\0"
        status = self._lib.espeak_Synth(encoded, len(encoded), 0, _POS_CHARACTER, 0, _CHARS_UTF8 | _ENDPAUSE,
                                        None, None)
        samples, self._samples = self._samples, []
        if status != _EE_OK:
            raise RuntimeError(f"espeak_Synth failed (error {status})")
        return np.concatenate(samples) if samples else np.zeros(0, np.int16)

    def close(self) -> None:
        """Free the library's state and unload it (the next load of the same file starts fresh)."""
        if self._closed:
            return
        self._closed = True
        self._lib.espeak_Terminate()
        _unload(self._lib)


def _unload(lib: ctypes.CDLL) -> None:
    if sys.platform == "win32":
        _ctypes.FreeLibrary(lib._handle)  # type: ignore[attr-defined]
    else:
        _ctypes.dlclose(lib._handle)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# phonemes: one shared instance
# ---------------------------------------------------------------------------------------------

_shared: EspeakLibrary | None = None
_shared_lock = threading.Lock()


def shared_library() -> EspeakLibrary:
    """The process-wide instance used for phonemes (loaded on first use). Hold ``.lock`` while using it."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = EspeakLibrary(*bundled_paths())
        return _shared


def check_voice(voice: str) -> None:
    """Raise UnknownVoiceError when ``voice`` is not an espeak-ng voice (EspeakUnavailableError: no library)."""
    library = shared_library()
    with library.lock:
        library.set_voice(voice)


def phonemize(texts: Sequence[str], voice: str) -> list[str]:
    """IPA of each text (one library call per clause, the voice set once for all)."""
    if not texts:
        return []
    library = shared_library()
    with library.lock:
        library.set_voice(voice)
        return [library.text_to_phonemes(text) for text in texts]


# ---------------------------------------------------------------------------------------------
# audio: a fresh instance per clip
# ---------------------------------------------------------------------------------------------

class Renderer:
    """Renders clips, each with a freshly initialised private copy of the library (see the module docstring).

    Use as a context manager (the copy lives in a temporary folder); one renderer per thread.
    """

    def __init__(self) -> None:
        library, self.data_path = bundled_paths()
        self._folder = tempfile.mkdtemp(prefix="myxtts-espeak-")
        self.library_path = str(Path(self._folder) / Path(library).name)
        shutil.copyfile(library, self.library_path)
        first = EspeakLibrary(self.library_path, self.data_path)  # fails here, not at the first clip
        self.sample_rate = first.sample_rate
        first.close()

    def render(self, text: str, voice: str, rate: int = 175, pitch: int = 50) -> np.ndarray:
        """int16 samples at ``sample_rate``; UnknownVoiceError for a voice espeak-ng does not have."""
        library = EspeakLibrary(self.library_path, self.data_path)
        try:
            return library.synthesize(text, voice, rate, pitch)
        finally:
            library.close()

    def close(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> "Renderer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
