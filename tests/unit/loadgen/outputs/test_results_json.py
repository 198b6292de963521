"""results.json: round trip, atomic write, and a schema-version guard that fails clearly."""

import json

import pytest

from servingctl.loadgen.outputs import ResultsFileError, read_results, write_results
from servingctl.schema.results import SCHEMA_VERSION


def test_round_trip_from_file_and_directory(run, tmp_path):
    path = write_results(run, tmp_path / "out")
    assert path.name == "results.json"
    assert read_results(path) == run
    assert read_results(tmp_path / "out") == run
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]  # no temporary file left behind


def test_rewrite_keeps_previous_file_when_serialisation_fails(run, tmp_path, monkeypatch):
    path = write_results(run, tmp_path)
    before = path.read_text()

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(type(run), "model_dump_json", boom)
    with pytest.raises(RuntimeError):
        write_results(run, tmp_path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def _with_version(run, tmp_path, version):
    data = json.loads(run.model_dump_json())
    if version is ...:
        del data["schema_version"]
    else:
        data["schema_version"] = version
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    return path


def test_newer_schema_version_fails_naming_both_versions(run, tmp_path):
    path = _with_version(run, tmp_path, SCHEMA_VERSION + 1)
    with pytest.raises(
        ResultsFileError, match=rf"schema_version {SCHEMA_VERSION + 1} is newer.*reads version {SCHEMA_VERSION}.*upgrade"
    ):
        read_results(path)


@pytest.mark.parametrize("version", [..., "1", 0, True, None])
def test_missing_or_unknown_schema_version_fails(run, tmp_path, version):
    path = _with_version(run, tmp_path, version)
    with pytest.raises(ResultsFileError, match="is not a servingctl results schema version"):
        read_results(path)


def test_invalid_content_names_the_field(run, tmp_path):
    data = json.loads(run.model_dump_json())
    data["scenarios"][0]["summary"]["concurrency"] = "four"
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(ResultsFileError, match=r"invalid at scenarios\.0\.summary\.concurrency"):
        read_results(tmp_path)


def test_missing_and_non_json_files(tmp_path):
    with pytest.raises(ResultsFileError, match="no such results file"):
        read_results(tmp_path / "nope.json")
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(ResultsFileError, match="not a readable JSON"):
        read_results(tmp_path)
    (tmp_path / "results.json").write_text("[1, 2]")
    with pytest.raises(ResultsFileError, match="top level is not an object"):
        read_results(tmp_path)
