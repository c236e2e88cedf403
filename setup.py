"""Package discovery (the rest of the build is in pyproject.toml): every package under autoprune/
(a new task is one package: nothing to list) plus the bundled DEFAULT profiles, installed as
autoprune.pretrained_sensitivities."""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["autoprune", "autoprune.*"])
      + ["autoprune.pretrained_sensitivities"])
