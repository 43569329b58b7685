"""call_with_options: a library call's keywords come from the parsed options of their names."""

import argparse

from qkv.cli.main import build_parser
from qkv.cli.options import call_with_options


def _library(subject, path="out.png", *, beam=1, device="cpu", count=4, stream=None):
    return dict(subject=subject, path=path, beam=beam, device=device, count=count, stream=stream)


def test_keywords_are_taken_from_the_options_of_their_names():
    args = argparse.Namespace(subject="from args", beam=4, device="cuda", json=True, run=print)
    called = call_with_options(_library, args, "given first")
    # positional passed as given, never replaced by the option of its name; options the
    # function does not take (json, run) are left out; count and stream keep their defaults
    assert called == dict(
        subject="given first", path="out.png", beam=4, device="cuda", count=4, stream=None
    )


def test_given_values_override_and_add_to_the_options():
    args = argparse.Namespace(subject="s", path="a.png", beam=4, device="cuda")
    called = call_with_options(_library, args, "s", beam=2, stream=print)
    assert called == dict(subject="s", path="a.png", beam=2, device="cuda", count=4, stream=print)


def test_a_parameter_left_by_positional_arguments_can_come_from_the_options():
    args = argparse.Namespace(subject="from args", path="b.png")
    called = call_with_options(_library, args)
    assert (called["subject"], called["path"]) == ("from args", "b.png")


def test_generate_no_cache_is_the_use_cache_parameter_turned_off():
    parse = build_parser().parse_args
    assert parse(["generate", "--checkpoint", "run"]).use_cache is True
    assert parse(["generate", "--checkpoint", "run", "--no-cache"]).use_cache is False
