#!/usr/bin/env python3
"""Bash and zsh completions for one coli program, read from its --help.

CLI11 has no completion generator, so this runs `PROGRAM --help` (and
`PROGRAM SUB... --help` for every subcommand it lists), collects the options,
the subcommands and the choices CLI11 prints as TEXT:{a,b,c}, and writes one
bash and one zsh script. Run at build time (cmake/Install.cmake).

usage: completions.py PROGRAM NAME BASH_OUT ZSH_OUT
"""
import os
import re
import subprocess
import sys

OPTION = re.compile(r"^  (-[\w-]+(?:,-[\w-]+)*)(?:\s+(\S+))?")
SUBCOMMAND = re.compile(r"^  ([a-z][\w-]*)\s")
CHOICES = re.compile(r"\{([^}]*)\}")


def read_help(program, words):
    text = subprocess.run([program, *words, "--help"], capture_output=True, text=True, check=True).stdout
    options, subcommands, choices = [], [], {}
    section = None
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            section = line[:-1]
            continue
        if section == "Options" and (m := OPTION.match(line)):
            names = [n for n in m.group(1).split(",") if n.startswith("-")]
            options += names
            if m.group(2) and (c := CHOICES.search(m.group(2))):
                for name in names:
                    choices[name] = c.group(1).replace(",", " ")
        elif section == "Subcommands" and (m := SUBCOMMAND.match(line)):
            subcommands.append(m.group(1))
    return options, subcommands, choices


def walk(program):
    """{key: (options, subcommands, choices)}; the key is '.' then the subcommand words."""
    tree, pending = {}, [[]]
    while pending:
        words = pending.pop()
        options, subcommands, choices = read_help(program, words)
        tree[" ".join(["."] + words)] = (options, subcommands, choices)
        pending += [words + [s] for s in subcommands]
    return tree


def assoc(entries):
    return "\n".join(f'  ["{k}"]="{v}"' for k, v in entries)


def bash_script(name, tree):
    fn = "_" + re.sub(r"\W", "_", name)
    opts = assoc((k, " ".join(o)) for k, (o, _, _) in tree.items())
    subs = assoc((k, " ".join(s)) for k, (_, s, _) in tree.items())
    choices = assoc((f"{k}|{opt}", v) for k, (_, _, c) in tree.items() for opt, v in c.items())
    return f"""# bash completion for {name}, generated from its --help by tools/completions.py.
declare -gA {fn}_opts=(
{opts}
)
declare -gA {fn}_subs=(
{subs}
)
declare -gA {fn}_choices=(
{choices}
)
{fn}() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" key="." i
  for ((i = 1; i < COMP_CWORD; i++)); do
    if [[ " ${{{fn}_subs[$key]}} " == *" ${{COMP_WORDS[i]}} "* ]]; then key="$key ${{COMP_WORDS[i]}}"; fi
  done
  if [[ -n "${{{fn}_choices[$key|$prev]+set}}" ]]; then
    mapfile -t COMPREPLY < <(compgen -W "${{{fn}_choices[$key|$prev]}}" -- "$cur")
  elif [[ "$cur" == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "${{{fn}_opts[$key]}}" -- "$cur")
  else
    mapfile -t COMPREPLY < <(compgen -W "${{{fn}_subs[$key]}}" -- "$cur")
  fi
}}
complete -o default -o bashdefault -F {fn} {name}
"""


def zsh_script(name, tree):
    def table(entries):
        return "\n".join(f'  "{k}" "{v}"' for k, v in entries)

    opts = table((k, " ".join(o)) for k, (o, _, _) in tree.items())
    subs = table((k, " ".join(s)) for k, (_, s, _) in tree.items())
    choices = table((f"{k}|{opt}", v) for k, (_, _, c) in tree.items() for opt, v in c.items())
    return f"""#compdef {name}
# zsh completion for {name}, generated from its --help by tools/completions.py.
local -A opts subs choices
opts=(
{opts}
)
subs=(
{subs}
)
choices=(
{choices}
)
local key="." i
for ((i = 2; i < CURRENT; i++)); do
  if [[ " ${{subs[$key]}} " == *" ${{words[i]}} "* ]]; then key="$key ${{words[i]}}"; fi
done
local prev="${{words[CURRENT-1]}}"
if (( ${{+choices[$key|$prev]}} )); then
  compadd -- ${{=choices[$key|$prev]}}
elif [[ "$PREFIX" == -* ]]; then
  compadd -- ${{=opts[$key]}}
else
  compadd -- ${{=subs[$key]}}
  _files
fi
"""


def main():
    program, name, bash_out, zsh_out = sys.argv[1:5]
    tree = walk(program)
    for path, text in ((bash_out, bash_script(name, tree)), (zsh_out, zsh_script(name, tree))):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
