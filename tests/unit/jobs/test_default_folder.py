"""``hqa evaluate``'s default run folder (issue 53): README's two selective-answering commands — the default and
``HQA_PROGRAMS__ABSTAIN=off`` — write two folders, neither wipes the other with ``--fresh``, and no ``:`` is in a
folder name."""

from hqa.config import load_settings
from hqa.jobs.evaluate import default_folder


def test_each_configuration_of_a_program_has_its_own_default_folder():
    plain = default_folder(load_settings(None, environ={}), "simple", "compmix/test:answerable")
    off = default_folder(load_settings(None, environ={"HQA_PROGRAMS__ABSTAIN": "off"}), "simple",
                         "compmix/test:answerable")
    assert plain == "simple-compmix-test-answerable" and off == "simple-compmix-test-answerable-abstain-off"
    two = default_folder(load_settings(None, environ={"HQA_PROGRAMS__ANSWER_MODE": "free",
                                                      "HQA_PROGRAMS__CHOICES": "3"}), "humaniq", "mintaka/test")
    assert two == "humaniq-mintaka-test-answer-mode-free-choices-3" and ":" not in plain + off + two
