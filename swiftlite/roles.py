"""What a host can run: every server role and daemon, where its code lives, and which config
section it reads. `swiftlite server|daemon` starts one; `swiftlite node` starts those its config
names. Modules are named, not imported: a process loads only its own role's code."""

from __future__ import annotations

# role -> (module, app factory, config section); each factory takes the role's config Section.
SERVERS = {
    "proxy": ("swiftlite.proxy.server", "create_app", "proxy-server"),
    "object": ("swiftlite.obj.server", "create_app", "object-server"),
    "container": ("swiftlite.container.server", "create_app", "container-server"),
    "account": ("swiftlite.account.server", "create_app", "account-server"),
}

# daemon -> (module, entry, config section); entry(conf, once) runs the daemon.
DAEMONS = {
    "object-replicator": ("swiftlite.obj.replicator", "run_daemon", "object-replicator"),
    "object-reconstructor": ("swiftlite.obj.reconstructor", "run_daemon",
                             "object-reconstructor"),
    "object-updater": ("swiftlite.obj.updater", "run_daemon", "object-updater"),
    "object-auditor": ("swiftlite.obj.auditor", "run_daemon", "object-auditor"),
    "object-expirer": ("swiftlite.obj.expirer", "run_daemon", "object-expirer"),
    "container-replicator": ("swiftlite.container.replicator", "run_daemon",
                             "container-replicator"),
    "account-replicator": ("swiftlite.account.replicator", "run_daemon", "account-replicator"),
    "container-sharder": ("swiftlite.container.sharder", "run_daemon", "container-sharder"),
    "container-reconciler": ("swiftlite.container.reconciler", "run_daemon",
                             "container-reconciler"),
}
