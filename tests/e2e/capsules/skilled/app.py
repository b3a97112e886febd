"""skilled: two Agent Skills in skills/, served as the skills extension's resources, and one plain resource.

Every skill is hidden from the principal `bob` (`visible=`), to show that skills are per principal.
"""

from astrid_sdk import Capsule

capsule = Capsule("skilled")


@capsule.resource("astrid://skilled/about", mime_type="text/plain")
def about(ctx):
    return "a capsule with skills"


capsule.skills(visible=lambda ctx: ctx.principal != "bob")

WitWorld = capsule.world()
