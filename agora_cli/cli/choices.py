"""Options whose value is a word of a fixed set: checked while the command line is parsed.

``choice_option("--status", RUN_STATUSES, help=…)`` is a Typer option whose value is one of
the words, checked before the command runs (so nothing is read or written): any other value is
a usage error, exit 2, one line that names every choice::

    error: Invalid value for '--status': 'fail' is not one of 'running', 'completed',
    'failed', 'cancelled'. (see `agora runs list --help`)

the same line Typer prints for an ``Enum`` option (``case_sensitive=False``), which is the other
way to write one. Words are matched whatever their case and come back as the set spells them
(``FAILED`` is ``failed``): a word in capitals is never read as a different, empty filter. With
``separator`` the value is a list (``--by day,model``) and each word is checked alone, then
(``combos``) the list as a whole. ``--help`` shows the words (a list's after its help text) and
the shell completes them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import typer

__all__ = ["Choice", "choice_option"]


class Choice:
    """One word of ``choices`` (or, with ``separator``, up to ``max_parts`` of them), as the
    parser of a Typer option: returns the word as ``choices`` spells it, or raises
    ``typer.BadParameter`` naming every choice."""

    def __init__(
        self,
        choices: Sequence[str],
        *,
        separator: str | None = None,
        max_parts: int = 1,
        combos: Collection[str] | None = None,
        combos_hint: str | None = None,
    ) -> None:
        self.__name__ = "choice"  # what Click calls the parameter type
        self.choices = tuple(choices)
        self.separator = separator
        self.max_parts = max_parts if separator else 1
        self.combos = None if combos is None else tuple(combos)
        self.combos_hint = combos_hint
        self._by_folded = {c.casefold(): c for c in self.choices}

    def __repr__(self) -> str:
        parts = ""
        if self.separator:
            parts = f", separator={self.separator!r}, max_parts={self.max_parts}"
        return f"Choice({list(self.choices)!r}{parts})"

    @property
    def metavar(self) -> str:
        """``a|b|c`` for one word; a list's is ``WORD[,WORD]`` (its words go in the help: a
        metavar that long would be folded by --help)."""
        if self.separator:
            more = self.separator + "WORD" if self.max_parts == 2 else f"{self.separator}…"
            return f"WORD[{more}]"
        return "|".join(self.choices)

    def _listed(self) -> str:
        return ", ".join(repr(c) for c in self.choices)

    def _word(self, word: str, whole: str) -> str:
        found = self._by_folded.get(word.strip().casefold())
        if found is None:
            prefix = f"{whole!r}: " if whole != word else ""
            raise typer.BadParameter(f"{prefix}{word!r} is not one of {self._listed()}.")
        return found

    def __call__(self, value: Any) -> str:
        text = str(value)
        if self.separator is None:
            return self._word(text, text)
        parts = text.split(self.separator)
        if len(parts) > self.max_parts:
            raise typer.BadParameter(
                f"{text!r} has {len(parts)} parts: at most {self.max_parts} of {self._listed()}, "
                f"joined by {self.separator!r}."
            )
        words = [self._word(part, text) for part in parts]
        joined = self.separator.join(words)
        if self.combos is not None and joined not in self.combos:
            hint = self.combos_hint or ", ".join(repr(c) for c in sorted(self.combos))
            raise typer.BadParameter(f"{text!r} is not one of the combinations: {hint}.")
        return joined

    def complete(self, incomplete: str) -> list[str]:
        """The shell's completions of ``incomplete``: the words, or a list's combinations, or
        (without them) a word after the last separator."""
        if self.combos is not None:
            pool = dict.fromkeys((*self.choices, *self.combos))
            return [c for c in pool if c in self.combos and c.startswith(incomplete.casefold())]
        head, sep, last = (
            incomplete.rpartition(self.separator) if self.separator else ("", "", incomplete)
        )
        done = f"{head}{sep}"
        return [done + c for c in self.choices if c.startswith(last.casefold())]


def choice_option(
    flag: str,
    choices: Choice | Sequence[str],
    *,
    help: str,
    **options: Any,
) -> Any:
    """A Typer option (for ``Annotated[str | None, …]``) whose value is one of ``choices``."""
    choice = choices if isinstance(choices, Choice) else Choice(choices)
    options.setdefault("show_default", False)
    if choice.separator:
        help = f"{help} WORD: {', '.join(choice.choices)}."
    return typer.Option(
        flag,
        parser=choice,
        metavar=choice.metavar,
        help=help,
        autocompletion=choice.complete,
        **options,
    )
