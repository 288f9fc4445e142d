"""core.log: messages go to stderr by level; Progress reports every 10 %."""

from vllm_fork.core import log


def test_quiet_keeps_warnings_and_drops_info(capsys, monkeypatch):
    monkeypatch.setenv(log.LEVEL_ENV, "quiet")
    log.info("step")
    log.warning("cache entry rebuilt")
    out, err = capsys.readouterr()
    assert out == "" and err == "warning: cache entry rebuilt\n"
    monkeypatch.setenv(log.LEVEL_ENV, "verbose")
    log.detail("more")
    assert capsys.readouterr().err == "more\n"


def test_progress_reports_each_tenth_once():
    lines = []
    progress = log.Progress("compile", 200, log=lines.append)
    for _ in range(200):
        progress.advance()
    assert [ln.split()[1] for ln in lines] == [f"{p}%" for p in range(0, 101, 10)]  # the first unit shows 0 %
    progress = log.Progress("link", log=lines.append)
    progress.update(3, 4)
    assert lines[-1].split()[1] == "75%"
