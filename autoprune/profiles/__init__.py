"""DEFAULT sensitivity profiles: the lookup (:mod:`autoprune.flow.defaults`) and the building
(:mod:`autoprune.profiles.build`), one loop over the registered tasks."""
from ..flow.defaults import (DEFAULT, PROFILE_DIR_ENV, available_profiles, find_profile,
                             profile_dir, profiles_in, register_profile)
from .build import arch_key_of, build_profile, finish_profile, profile_name

__all__ = ["DEFAULT", "PROFILE_DIR_ENV", "arch_key_of", "available_profiles", "build_profile",
           "find_profile", "finish_profile", "profile_dir", "profile_name", "profiles_in",
           "register_profile"]
