"""The command-line options for the engine's build parameters: one per field of rtl.params.EngineParams (an integer's
`--name N`, a flag's `--name` / `--no-name`), shared by `rtl verilog`, `rtl estimate` and `fpga build` (rtl.params
is plain Python: no Amaranth here)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Callable

from driver.errors import ArkdmaError


def _fields() -> list[dataclasses.Field]:
    from rtl.params import EngineParams

    return [f for f in dataclasses.fields(EngineParams) if f.type in (int, "int", bool, "bool")]


def _is_flag(f: dataclasses.Field) -> bool:
    return f.type in (bool, "bool")


def add_param_options(parser: argparse.ArgumentParser, data_width: int | None = None,
                      description: str | None = None) -> None:
    """--data-width, --slots, ...; `data_width` overrides EngineParams' own default (`rtl estimate` uses 64).
    `description`: the group's, where the defaults are another set's (`fpga build`: the board's or the card's; its
    help then shows them through `DefaultsFormatter`)."""
    group = parser.add_argument_group(
        "engine parameters", description or ("rtl.params.EngineParams; unset ones keep its defaults"
                                             + (f", except --data-width {data_width}" if data_width else "")))
    for f in _fields():
        default = data_width if f.name == "data_width" and data_width else f.default
        if _is_flag(f):
            group.add_argument("--" + f.name.replace("_", "-"), dest=f.name, action=argparse.BooleanOptionalAction,
                               default=None, help=f"(default {'on' if default else 'off'})")
        else:
            group.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=int, default=None, metavar="N",
                               help=f"(default {default})")
    parser.set_defaults(engine_data_width_default=data_width)


def given_params(args: argparse.Namespace) -> dict[str, int | bool]:
    """The engine parameters given as options, by field name."""
    return {f.name: getattr(args, f.name) for f in _fields() if getattr(args, f.name, None) is not None}


def params_from(args: argparse.Namespace, make=None):
    """EngineParams from the options given (the rest default, or `make(**given)` fills them); a rejected set is
    a clear error."""
    from rtl.params import EngineParams

    given = given_params(args)
    if make is None and getattr(args, "engine_data_width_default", None):
        given.setdefault("data_width", args.engine_data_width_default)
    try:
        return (make or EngineParams)(**given)
    except (TypeError, ValueError) as exc:
        raise ArkdmaError(f"engine parameters rejected: {exc}") from exc


class DefaultsFormatter(argparse.HelpFormatter):
    """Help whose engine parameters show the defaults of named sets of EngineParams, computed only when the help is
    shown (they come from modules the CLI imports lazily): `sets()` gives {name: EngineParams}."""

    sets: Callable[[], dict[str, object]] = staticmethod(dict)

    @classmethod
    def of(cls, sets: Callable[[], dict[str, object]]) -> type[DefaultsFormatter]:
        return type("DefaultsOf", (cls,), {"sets": staticmethod(sets)})

    @functools.cached_property
    def _fields_by_name(self) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in _fields()}

    @functools.cached_property
    def _made(self) -> dict[str, object]:
        """The sets, made once per help text rather than once per option."""
        return self.sets()

    def _get_help_string(self, action: argparse.Action) -> str:
        names = self._fields_by_name
        if action.dest not in names or not (action.help or "").startswith("(default "):
            return super()._get_help_string(action)
        shown = []
        for label, params in self._made.items():
            value = getattr(params, action.dest)
            shown.append(f"{label} {('on' if value else 'off') if _is_flag(names[action.dest]) else value}")
        return f"(default {'; '.join(shown)})".replace("%", "%%")
