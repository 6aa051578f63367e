__version__ = "0.0.0+spindle-test"


def recipe_user_metadata(recipe_name: str) -> dict[str, str]:
    """The cookbook's user_metadata for a recipe's ServiceClient."""
    return {"recipe_name": recipe_name, "git_rev": __version__}
