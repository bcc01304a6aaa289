"""States packs: Residual States made shareable.

`swe-residual states pack` copies what one track's states need into one self-contained pack
(a directory, or a deterministic .tar.gz), so a states file built in one checkout runs in another:

    PACK/
      states.yaml         the track's entries, artifact paths rewritten to the files below
      artifacts/<id>.patch (or <id>.interactions.jsonl)
      trajectories/<id>.json      the predecessor's trajectory, when the entry names one
      pack.json           provenance: track, state ids, who/when, source states file and work
                          dir, harness version, the task repository commit the states were
                          checked against ("unknown" when not known)
      checksums.sha256    sha256 of every other file (`sha256sum -c checksums.sha256` reads it)

`swe-residual states fetch SOURCE` installs one into the cache (<cache>/states/<track>/, next to
the fetched tasks) from a dir, a .tar.gz, an http(s) URL of one, or a git repository. Everything
fetched is hostile input: an archive member that is a link, a device, absolute, climbs out with
`..`, is too large, or comes after too many members stops the fetch with one line naming it;
nothing is written outside a staging dir in the cache, and the install is renamed into place
whole only after every checksum and the states file checked out.

One module per concern: pack.py (the format; `states pack`), fetch.py (`states fetch`: the
source, download or clone, install), safecopy.py (a hostile tree or tarball staged within limits),
verify.py (the checks of a pack), installed.py (`states list`; notes on the tasks).
"""
