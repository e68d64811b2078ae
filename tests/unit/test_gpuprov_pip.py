"""/etc/pip.conf as the bundle's client leaves it (plugins/filter/gpuprov_pip.py): others'
settings are theirs. Inputs are hand-written files; expected values written out."""

from __future__ import annotations

from gpuprov_pip import pip_conf

OURS = "# Written by gpuprov\nTypes: deb\nURIs: http://old-cache:8470/apt\nSuites: /\n"


def test_a_host_with_no_pip_conf_gets_the_bundle_s_host_trusted_over_http() -> None:
    assert pip_conf("", "", "http://cache:8470", True) == {
        "index_foreign": "",
        "remove": [],
        "trusted_host": "cache",
        "error": "",
    }


def test_others_trusted_hosts_are_kept_beside_the_bundle_s() -> None:
    text = "[global]\ntimeout = 60\ntrusted-host = mirror.example\n    other:8080\n"
    got = pip_conf(text, "", "http://cache:8470", True)
    assert got["trusted_host"] == "mirror.example other:8080 cache"
    assert got["index_foreign"] == ""


def test_over_https_the_bundle_s_host_goes_and_the_others_stay() -> None:
    text = "[global]\nindex-url = https://cache:8470/simple/\ntrusted-host = cache mirror.example\n"
    got = pip_conf(text, "", "https://cache:8470/", False)
    assert got == {
        "index_foreign": "",
        "remove": [],
        "trusted_host": "mirror.example",
        "error": "",
    }


def test_an_index_someone_else_set_is_named() -> None:
    text = "[global]\nindex-url = https://devpi.example/root/pypi/+simple/\n"
    got = pip_conf(text, "", "http://cache:8470", True)
    assert got["index_foreign"] == "https://devpi.example/root/pypi/+simple/ ([global] index-url)"


def test_the_index_and_host_of_an_earlier_bundle_url_are_the_client_s_own() -> None:
    text = "[global]\nindex-url = http://old-cache:8470/simple/\ntrusted-host = old-cache\n"
    got = pip_conf(text, OURS, "http://cache:8470", True)
    assert got == {"index_foreign": "", "remove": [], "trusted_host": "cache", "error": ""}


def test_the_same_bundle_again_changes_nothing() -> None:
    text = "[global]\nindex-url = http://cache:8470/simple/\ntrusted-host = cache\n"
    source = "URIs: http://cache:8470/apt\n"
    assert pip_conf(text, source, "http://cache:8470", True) == {
        "index_foreign": "",
        "remove": [],
        "trusted_host": "cache",
        "error": "",
    }


def test_an_ipv6_bundle_host_is_trusted_without_brackets_or_port() -> None:
    assert pip_conf("", "", "http://[fd00::5]:8470", True)["trusted_host"] == "fd00::5"


def test_a_file_that_is_not_ini_is_named_and_nothing_decided() -> None:
    got = pip_conf("index-url = x\n", "", "http://cache:8470", True)
    assert got["error"].startswith("File contains no section headers")
    assert got["trusted_host"] == ""


def test_pip_s_other_spellings_and_sections_are_read_as_pip_reads_them() -> None:
    """pip reads index_url as index-url, and [install] over [global] for pip install."""
    text = "[global]\nindex_url = https://devpi.example/simple/\ntrusted_host = m.example\n"
    got = pip_conf(text, "", "http://cache:8470", True)
    assert got["index_foreign"] == "https://devpi.example/simple/ ([global] index_url)"
    assert got["trusted_host"] == "m.example cache"
    assert got["remove"] == [
        {"section": "global", "option": "index_url"},
        {"section": "global", "option": "trusted_host"},
    ]
    install = "[install]\nindex-url = https://proxy.example/simple\n"
    got = pip_conf(install, "", "http://cache:8470", True)
    assert got["index_foreign"] == "https://proxy.example/simple ([install] index-url)"
    assert got["remove"] == [{"section": "install", "option": "index-url"}]


def test_the_bundle_s_own_index_in_another_case_is_its_own() -> None:
    text = "[global]\nindex-url = HTTP://Cache:8470/simple/\ntrusted-host = Cache\n"
    got = pip_conf(text, "", "http://cache:8470", True)
    assert got == {"index_foreign": "", "remove": [], "trusted_host": "cache", "error": ""}
