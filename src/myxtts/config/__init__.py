"""Typed configuration: one place for defaults, validated on load.

A config is six sections (data / audio / text / model / training / vocoder), each a frozen dataclass (``sections``).
``load_config`` (``loading``) reads YAML, rejects unknown keys naming the key path and the closest valid key,
checks every type, then ``validation.validate`` every range and cross-key rule, raising ``ConfigError`` (an
``InputError``, so a ``ValueError``; never ``assert``). Every key is read by some part of the system; keys of the
original codebase that would do nothing are rejected with a message naming what replaces them.
"""

from myxtts.config.loading import apply_overrides, config_from_dict, load_config, save_config
from myxtts.config.sections import (AUTOTUNE, MODEL_MODULES, MOVED_KEYS, REMOVED_KEYS, AudioConfig, Config,
                                    ConfigError, DataConfig, ModelConfig, TextConfig, TrainingConfig, VocoderConfig)
from myxtts.config.validation import (AUTOREGRESSIVE_ONLY_KEYS, DEFAULT_REDUCTION_FACTOR, PARALLEL_ONLY_KEYS,
                                      validate)

__all__ = ["AUTOREGRESSIVE_ONLY_KEYS", "AUTOTUNE", "AudioConfig", "Config", "ConfigError", "DEFAULT_REDUCTION_FACTOR",
           "DataConfig", "MODEL_MODULES", "MOVED_KEYS", "ModelConfig", "PARALLEL_ONLY_KEYS", "REMOVED_KEYS", "TextConfig",
           "TrainingConfig", "VocoderConfig", "apply_overrides", "config_from_dict", "load_config", "save_config",
           "validate"]
