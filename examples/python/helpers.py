"""The functions the Python examples name (seed 002, "Python in a Graph").

Each graph here declares `functions: helpers.py`, so these names can be
used bare: in `until`, in conditions and routers, as reducers, and as a
`function` node's `callable`. A function node receives the state's fields,
its `tool_args` and its scope (a map item, `loop`) as keyword arguments;
it takes what it names and `**kwargs` tolerates the rest.
"""


def write_tagline(topic, loop, tagline="", **kwargs):
    """The loop's body: a first draft, then shorter ones as told."""
    if not tagline:
        return {"tagline": f"{topic} runs your workflow graphs on a cluster, durably, with traces and retries"}
    words = tagline.split()
    # The predicate's reason arrives as the loop's feedback.
    return {"tagline": " ".join(words[: max(3, len(words) - 4)]), "advice": loop["feedback"]}


def tagline_is_short(it):
    """`until`: one LoopIteration; True, or (False, what to do next)."""
    words = len(str(it.output).split())
    if words < 6:
        return True
    return False, f"{words} words, cut it to under six"


def gather_lines(notes, **kwargs):
    """Any other value than a dict goes to the node's output_key (its id)."""
    return "\n".join(line.strip() for line in notes.split(";"))


def drop_duplicates(gather, **kwargs):
    """`gather` is the node id it depends on."""
    seen, out = set(), []
    for line in str(gather).splitlines():
        if line not in seen:
            seen.add(line)
            out.append(line)
    return "\n".join(out)


def summarize(topic, **kwargs):
    """A map's branch: the item, bound as `topic`, wins over the state's."""
    return f"{topic}: {len(topic)} letters"
