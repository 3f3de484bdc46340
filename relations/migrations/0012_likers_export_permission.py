# The permission to export a video's likers (issue 14 §6, OPS-9): state only (permissions live on
# `default`, created by post_migrate), granted to no role; an administrator grants it to a person.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("relations", "0011_runtime_switches"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="likerelation",
            options={"permissions": [("export_video_likers", "Can export a video's likers, with a stated purpose")]},
        ),
    ]
