"""A missing or too old Java ends in one readable message (real subprocesses, no Spark)."""

from __future__ import annotations

import os
import stat

import pytest

from epochal.control.slots import local_slots
from epochal.control.spark import check_java
from epochal.errors import JavaNotFoundError


def fake_java(tmp_path, version_line):
    bin_dir = tmp_path / "jdk" / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return tmp_path / "jdk"


def test_missing_java(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="no Java runtime found.*version 17 or newer"):
        check_java()


def test_old_java(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path, 'openjdk version "11.0.2" 2019-01-15')))
    with pytest.raises(JavaNotFoundError, match="is Java 11"):
        check_java()


def test_java_8_style_version(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path, 'java version "1.8.0_292"')))
    with pytest.raises(JavaNotFoundError, match="is Java 8"):
        check_java()


def test_new_enough_java(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path, 'openjdk version "21.0.1" 2023-10-17')))
    assert check_java() == 21


def test_local_slot_parsing():
    assert local_slots("local") == 1
    assert local_slots("local[3]") == 3
    assert local_slots("local[4,2]") == 4
    assert local_slots("local[*]") == (os.cpu_count() or 1)
    assert local_slots("spark://host:7077") is None
