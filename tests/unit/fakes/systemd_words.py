# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""systemd's ExecStart= word splitting, for the tests of what the roles write into units."""

from __future__ import annotations


def systemd_split(line: str) -> list[str]:
    """systemd's ExecStart= word splitting (extract_first_word with EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE, then
    specifier and $ expansion), for the subset of syntax systemd_quote writes: double quotes, \\\\ and \\",
    %% and $$. Anything else (a lone % or $, another escape) raises, as it would mean something else to systemd."""
    words, word, quoted, i, started = [], "", False, 0, False
    while i < len(line):
        char = line[i]
        if char == "\\":
            nxt = line[i + 1]
            if nxt not in '\\"':
                raise AssertionError("escape %r" % nxt)
            word += nxt
            i += 2
            started = True
            continue
        if char == '"':
            quoted = not quoted
            started = True
        elif char in "%$":
            if line[i + 1] != char:
                raise AssertionError("unescaped %r" % char)
            word += char
            i += 1
        elif char == " " and not quoted:
            if started:
                words.append(word)
            word, started = "", False
        elif char == "\n":
            raise AssertionError("line break")
        else:
            word += char
            started = True
        i += 1
    assert not quoted
    if started:
        words.append(word)
    return words
