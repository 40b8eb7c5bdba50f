"""A file named from an id the data chose (``myxtts.outputs.names``) never lands outside its folder: plain ids keep
their name, any other gets a readable one that no other id shares. Real folders in tmp_path."""

from __future__ import annotations

import os

import pytest

from myxtts.outputs import OutputRefused, path_in_folder, safe_file_name

HOSTILE_IDS = ["../escape.wav", "/tmp/abs.wav", "a/../../b.wav", "..", ".", "", "a/b", "a\\b", "a\0b", "C:\\x.wav",
               ".hidden", "trailing.", " spaced out ", "nul.wav", "CON", "a:b|c?*<>\"", "é" * 200, "../" * 40 + "x"]


def test_plain_ids_keep_their_name():
    for plain in ("LJ001-0001", "clip.wav", "p225_001", "привет", "1", "a.b-c_d"):
        assert safe_file_name(plain) == plain


@pytest.mark.parametrize("identifier", HOSTILE_IDS)
def test_a_hostile_id_becomes_one_plain_name_inside_the_folder(tmp_path, identifier):
    name = safe_file_name(identifier)
    assert name and name not in (".", "..") and not name.startswith((".", "-"))
    assert not set(name) & set("/\\\0:|?*<>\" ") and len(name.encode("utf-8")) <= 130
    folder = tmp_path / "plots"
    path = path_in_folder(folder, f"{name}_mel.png")
    assert path.parent == folder and path.resolve().parent == folder.resolve()


def test_names_stay_readable_and_distinct():
    assert safe_file_name("../escape.wav").startswith("escape.wav-")
    assert safe_file_name("/tmp/abs.wav").startswith("tmp_abs.wav-")
    assert safe_file_name("a/../../b.wav").startswith("a_b.wav-")
    assert safe_file_name("nul.wav").startswith("_nul.wav-")  # no Windows device name, whatever suffix follows
    names = [safe_file_name(identifier) for identifier in HOSTILE_IDS + ["a_b", "a_b-c14cddc0", "escape.wav"]]
    assert len(set(names)) == len(names)
    assert safe_file_name("../escape.wav") == safe_file_name("../escape.wav")  # the same id, the same file


def test_a_path_out_of_the_folder_is_refused(tmp_path):
    folder, outside = tmp_path / "plots", tmp_path / "elsewhere"
    folder.mkdir()
    outside.mkdir()
    for name in ("../x.png", str(outside / "x.png"), "."):
        with pytest.raises(OutputRefused, match="outside the output folder"):
            path_in_folder(folder, name)
    os.symlink(outside / "x_mel.png", folder / "x_mel.png")  # a link planted where a plot would go
    with pytest.raises(OutputRefused, match="x_mel.png"):
        path_in_folder(folder, "x_mel.png")
    assert not (outside / "x_mel.png").exists()
