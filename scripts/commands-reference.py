"""The flag reference of docs/commands.md ("Every command's flags"), from
the binary's own help: every command and subcommand of `fusegrpo`, each
flag with its one-line help. Paste its output over that section when a
command or flag changes (tests/tests/suite/docs_commands.rs fails until
docs/commands.md lists them).

    python3 scripts/commands-reference.py [target/release/fusegrpo] > /tmp/ref.md
"""

import re
import subprocess
import sys

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/fusegrpo"
SKIP = {"--help", "--version", "--log"}


def short_help(path):
    out = subprocess.run([BIN, *path, "-h"], capture_output=True, text=True, check=True).stdout
    return out


def subcommands(text):
    subs, inside = [], False
    for line in text.splitlines():
        if line.startswith("Commands:"):
            inside = True
            continue
        if inside:
            if not line.strip():
                break
            m = re.match(r"^  ([a-z][a-z0-9-]*)\s", line)
            if m and m.group(1) != "help":
                subs.append(m.group(1))
    return subs


def flags(text):
    """(flag with its value name, help) of each option line, continuation lines joined."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("Options:"):
            inside = True
            continue
        if not inside:
            continue
        m = re.match(r"^\s+(?:-\w, )?(--[a-z0-9-]+(?: <[^>]+>)?(?:\.\.\.)?)\s*(.*)$", line)
        if m:
            out.append([m.group(1), m.group(2).strip()])
        elif line.startswith("          ") and out:
            out[-1][1] = (out[-1][1] + " " + line.strip()).strip()
        elif not line.strip():
            continue
        else:
            inside = False
    return [(f, h) for f, h in out if f.split()[0] not in SKIP]


def walk(path, rows):
    text = short_help(path)
    subs = subcommands(text)
    if subs and not path:
        for s in subs:
            walk([s], rows)
        return
    if subs:
        for s in subs:
            walk(path + [s], rows)
        return
    about = text.split("\n\n", 1)[0].strip().replace("\n", " ")
    rows.append((" ".join(path), about, flags(text)))


def main():
    rows = []
    walk([], rows)
    for cmd, about, fl in rows:
        print(f"**`{cmd}`**: {about}")
        print()
        for f, h in fl:
            h = h.replace("|", "\\|")
            print(f"- `{f}` {h}".rstrip())
        if not fl:
            print("- no flags")
        print()


if __name__ == "__main__":
    main()
