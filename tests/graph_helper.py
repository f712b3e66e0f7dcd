"""What a TensorFlow graph runs under XLA."""


def xla_compiled_ops(graph_def, roots=None):
    """Names of the ops XLA must compile that `graph_def` runs.

    Starts from `graph_def`'s own nodes, or from the library functions named
    in `roots`, and follows every function a node calls (`PartitionedCall`,
    `While` bodies, ...), so a function nothing reaches is not counted.
    """
    bodies = {f.signature.name: f.node_def for f in graph_def.library.function}
    bodies[None] = graph_def.node
    names, seen, found = [None] if roots is None else list(roots), set(), []
    while names:
        name = names.pop()
        if name in seen or name not in bodies:
            continue
        seen.add(name)
        for node in bodies[name]:
            if node.attr["_XlaMustCompile"].b:
                found.append(node.name)
            for value in node.attr.values():  # the functions a node calls
                names += [value.func.name] + [f.name for f in value.list.func]
    return found
