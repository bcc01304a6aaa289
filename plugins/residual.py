"""The SWE-Residual pytest plugin, as conftest.py loads it (`plugins.residual`): in the controller
and in every xdist worker alike, it brings in

    plugins/options.py      the command line: pytest_addoption, the plan and the progress mode read
                            from it, a named track with nothing to run refused
    plugins/controller.py   the run's session (opened by the controller, joined by each worker), the
                            parametrization, a failure's reason, and the end of the run: summary,
                            tables, gates, run-info.json and the pages
    plugins/display.py      the live progress display (the controller registers it at configure)
"""

pytest_plugins = ["plugins.options", "plugins.controller"]
