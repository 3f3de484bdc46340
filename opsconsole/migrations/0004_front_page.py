# The console's front page (issue 14 §0): the gauge history its charts read, and the permission to see
# it, which every console role holds.

from django.db import migrations, models

from likes_project.migration_kit import ROLE_DEPENDENCIES, console_roles

DASHBOARD = [("opsconsole", "consolepermission", "view_dashboard",
              "Can see the pipeline's health on the console's front page")]


grant = console_roles(DASHBOARD)


class Migration(migrations.Migration):

    dependencies = [
        ("opsconsole", "0003_redact_token_log_entries"),
        *ROLE_DEPENDENCIES,
    ]

    operations = [
        migrations.CreateModel(
            name="GaugeSample",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("at", models.DateTimeField(unique=True)),
                ("values", models.JSONField(default=dict)),
            ],
            options={"ordering": ["-at"]},
        ),
        migrations.AlterModelOptions(
            name="consolepermission",
            options={"default_permissions": (), "managed": False, "permissions": [
                ("view_relation_lookup", "Can look up relations, commands and outbox rows"),
                ("view_dashboard", "Can see the pipeline's health on the console's front page"),
            ]},
        ),
        migrations.RunPython(grant, migrations.RunPython.noop, hints={"family": "default"}),
    ]
