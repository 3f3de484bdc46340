# `audit` 0001_initial … 0005_redaction, squashed (D133): what they leave on a new
# database, written once. A database that applied all of them records this one as applied and runs nothing.

import django.utils.timezone
import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ('audit', '0001_initial'),
        ('audit', '0002_append_only'),
        ('audit', '0003_chain'),
        ('audit', '0004_chain_roles'),
        ('audit', '0005_redaction'),
    ]

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='AuditChainCheckpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField()),
                ('seq', models.BigIntegerField(db_index=True)),
                ('row_hash', models.CharField(max_length=64)),
                ('signature', models.CharField(blank=True, default='', max_length=64)),
                ('key_id', models.CharField(blank=True, default='', max_length=16)),
            ],
            options={
                'ordering': ['-seq'],
            },
        ),
        migrations.CreateModel(
            name='AuditChainVerification',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ('actor', models.CharField(max_length=150)),
                ('channel', models.CharField(max_length=16)),
                ('job_id', models.BigIntegerField(blank=True, null=True)),
                ('status', models.CharField(choices=[('INTACT', 'Intact'), ('BROKEN', 'Broken')], max_length=8)),
                ('since_seq', models.BigIntegerField()),
                ('head_seq', models.BigIntegerField()),
                ('checked', models.BigIntegerField()),
                ('broken_seq', models.BigIntegerField(blank=True, null=True)),
                ('problem', models.CharField(blank=True, default='', max_length=512)),
                ('checkpoint_id', models.BigIntegerField(blank=True, null=True)),
                ('checkpoint_seq', models.BigIntegerField(blank=True, null=True)),
                ('signature_checked', models.BooleanField(default=False)),
            ],
            options={
                'ordering': ['-id'],
                'permissions': [('verify_auditchain', 'Can verify the audit chain')],
            },
        ),
        migrations.CreateModel(
            name='AuditRecord',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ('actor', models.CharField(max_length=150)),
                ('channel', models.CharField(max_length=16)),
                ('action', models.CharField(db_index=True, max_length=64)),
                ('target_type', models.CharField(max_length=32)),
                ('target_id', models.CharField(db_index=True, max_length=128)),
                ('params', models.JSONField(default=dict)),
                ('outcome', models.CharField(default='applied', max_length=32)),
                ('job_id', models.BigIntegerField(blank=True, db_index=True, null=True)),
                ('seq', models.BigIntegerField(blank=True, null=True, unique=True)),
                ('prev_hash', models.CharField(blank=True, db_default='', max_length=64)),
                ('row_hash', models.CharField(blank=True, db_default='', max_length=64)),
                ('redacted_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'db_table': 'opsconsole_auditrecord',
                'ordering': ['-at'],
            },
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='auditchaincheckpoint',
            trigger=pgtrigger.compiler.Trigger(name='audit_checkpoint_append_only', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;", hash='ea113e1f7bc90a58fcab204d6227c2954b46bc04', operation='UPDATE OR DELETE', pgid='pgtrigger_audit_checkpoint_append_only_0e907', table='audit_auditchaincheckpoint', when='BEFORE')),
        ),
        migrations.AddIndex(
            model_name='auditrecord',
            index=models.Index(condition=models.Q(('seq__isnull', True)), fields=['id'], name='audit_unchained_idx'),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='auditrecord',
            trigger=pgtrigger.compiler.Trigger(name='audit_append_only', sql=pgtrigger.compiler.UpsertTriggerSql(func="-- audit_append_only, version 2 (issue 31 §4, PRIV-4), CURRENT: the body of the BEFORE UPDATE OR DELETE row trigger\n-- on the audit log (django-pgtrigger wraps it in its function; likes_project/audit/models.py declares it, migration\n-- 0005_redaction installs it). Version 1 was pgtrigger's Protect: every UPDATE and DELETE refused.\n-- Every DELETE is still refused, and every UPDATE but a redaction's (likes_project/audit/redaction.py): a chained\n-- row (seq set) whose `redacted_at` is set and moves forward (NULL to a time, or a later time when a second account\n-- named in the same row is erased), whose `actor` is unchanged or becomes `user:<32 hex>` from `user:...`, and whose\n-- every other column is unchanged except `target_id` and `params`. The verifier accepts such a row only if a later\n-- `audit.redact` record lists it (docs/decisions.md D82, redaction).\nIF TG_OP = 'UPDATE'\n   AND OLD.seq IS NOT NULL\n   AND NEW.redacted_at IS NOT NULL\n   AND (OLD.redacted_at IS NULL OR NEW.redacted_at > OLD.redacted_at)\n   AND (NEW.actor = OLD.actor OR (OLD.actor LIKE 'user:%' AND NEW.actor ~ '^user:[0-9a-f]{32}$'))\n   AND (to_jsonb(NEW) - ARRAY['target_id', 'params', 'actor', 'redacted_at'])\n       = (to_jsonb(OLD) - ARRAY['target_id', 'params', 'actor', 'redacted_at'])\nTHEN\n    RETURN NEW;\nEND IF;\nRAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;\n", hash='e3a186c9f5d263be9bbadcee4c7fb9b6a6d80e43', operation='UPDATE OR DELETE', pgid='pgtrigger_audit_append_only_ecc7d', table='opsconsole_auditrecord', when='BEFORE')),
        ),
    ]
