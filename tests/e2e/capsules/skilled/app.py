"""skilled: two Agent Skills in skills/ and a dynamic one, served as the skills extension's, and a plain resource.

Every skill is hidden from the principal `bob` (`visible=`), to show that skills are per principal.
"""

from astrid_sdk import Capsule

capsule = Capsule("skilled")


@capsule.resource("astrid://skilled/about", mime_type="text/plain")
def about(ctx):
    return "a capsule with skills"


def not_bob(ctx):
    return ctx.principal != "bob"


capsule.skills(visible=not_bob)


# A dynamic skill: its SKILL.md is written per call (per principal), so its entry has no digests.
@capsule.skill(
    "skill://skilled/daily-brief/SKILL.md",
    description="Today's brief for the signed-in user. Use at the start of a working day.",
    frontmatter={"license": "MIT", "metadata": {"generated": "per principal"}},
    visible=not_bob,
)
def daily_brief(ctx):
    return f"# Brief for {ctx.principal}\n\nNothing is due today.\n"


WitWorld = capsule.world()
